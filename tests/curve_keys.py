"""CURVE key pairs for the tests: a broker, a client, a worker (echo* only), an admin and a stranger, made with
:func:`generaldomo.io.keys.keygen`, their public certificates in the broker's role directories."""

from __future__ import annotations

from pathlib import Path

import zmq

from generaldomo.io import keys
from generaldomo.io.auth import BrokerSecurity


class Keyring:
    """Key pairs made with :func:`keys.keygen`; public certificates copied into the role directories."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.secrets = root / "secrets"
        for role in ("clients", "workers", "admins"):
            (root / role).mkdir(parents=True)
        self.make("broker")
        self.make("client", "clients")
        self.make("worker", "workers", services="echo*")
        self.make("admin", "admins", "clients")
        self.make("stranger")

    def make(self, name: str, *roles: str, services: str | None = None) -> None:
        public, _ = keys.keygen(self.secrets, name, {"services": services} if services else None)
        for role in roles:
            (self.root / role / public.name).write_bytes(public.read_bytes())

    def secret(self, name: str) -> Path:
        return self.secrets / f"{name}.key_secret"

    def security(self) -> BrokerSecurity:
        r = self.root
        return BrokerSecurity.from_files(self.secret("broker"), r / "clients", r / "workers", r / "admins")

    def context(self, name: str) -> zmq.Context:
        """A context whose sockets are CURVE clients with key ``name``, trusting the broker's key."""
        public, secret = keys.load_secret(self.secret(name))
        context = zmq.Context()
        context.setsockopt(zmq.CURVE_PUBLICKEY, public)
        context.setsockopt(zmq.CURVE_SECRETKEY, secret)
        context.setsockopt(zmq.CURVE_SERVERKEY, keys.load_public(self.secret("broker")))
        return context
