"""CURVE on the broker's links: its key, the allowlists by role, and the ZAP handler that admits listed keys.

This module owns the broker's side of authentication. :class:`BrokerSecurity` holds the broker's key pair and a
:class:`~generaldomo.sansio.broker.access.Credential` for every admitted public key (a key listed in several role
directories holds several roles). :class:`ZapHandler` runs pyzmq's ``zmq.auth`` ThreadAuthenticator on the
broker's context: it admits exactly the listed keys and sets each connection's ZAP user id to the key's Z85
text, which libzmq attaches to every message as ``User-Id``; the links map it back with
:meth:`BrokerSecurity.credential`. A peer without CURVE, or with a key not listed, fails the handshake (the
link's monitor counts and logs it). It knows nothing of the protocol or of what roles allow.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs
import zmq
from zmq.auth.thread import ThreadAuthenticator

from generaldomo.io import keys
from generaldomo.sansio.broker.access import Credential, Role

__all__ = ["BrokerSecurity"]

ZAP_DOMAIN = "generaldomo"


@attrs.frozen
class BrokerSecurity:
    """The broker's CURVE key pair (Z85) and the credential of each admitted public key (Z85 text).

    Args:
        public_key: the broker's public key (Z85).
        secret_key: its secret key (Z85).
        credentials: each admitted public key (Z85 text) and its :class:`~generaldomo.sansio.broker.access.Credential`.

    Example::

        security = BrokerSecurity.from_files("keys/broker.key_secret", clients="keys/clients", workers="keys/workers")
        broker = Broker("router", ["tcp://*:5555"], security=security).start()
    """

    public_key: bytes
    secret_key: bytes
    credentials: Mapping[str, Credential]

    @classmethod
    def from_files(
        cls,
        secret: str | os.PathLike[str],
        clients: str | os.PathLike[str] | None = None,
        workers: str | os.PathLike[str] | None = None,
        admins: str | os.PathLike[str] | None = None,
    ) -> BrokerSecurity:
        """Load the broker's secret certificate and the directories of public certificates for each role.

        Args:
            secret: the broker's secret certificate (``generaldomo keygen``'s ``NAME.key_secret``).
            clients: a folder of the public certificates given the client role.
            workers: the same for the worker role (a certificate's ``services`` metadata limits what it may serve).
            admins: the same for the admin role.
        """
        public, secret_key = keys.load_secret(secret)
        listed: dict[str, tuple[set[Role], tuple[str, ...]]] = {}
        for role, directory in ((Role.CLIENT, clients), (Role.WORKER, workers), (Role.ADMIN, admins)):
            if directory is None:
                continue
            for key, services in keys.load_allowlist(directory).items():
                roles, patterns = listed.setdefault(key, (set(), ()))
                listed[key] = (roles | {role}, services if role is Role.WORKER else patterns)
        credentials = {k: Credential(k, frozenset(roles), patterns) for k, (roles, patterns) in listed.items()}
        return cls(public, secret_key, credentials)

    def credential(self, user_id: str) -> Credential | None:
        """The credential of the key whose Z85 text is ``user_id`` (None if it is not listed).

        Args:
            user_id: the key's Z85 text (libzmq's ``User-Id``).
        """
        return self.credentials.get(user_id)

    def admits(self, z85_key: bytes) -> bool:
        """True when the Z85 public key is listed for some role.

        Args:
            z85_key: the key, Z85.
        """
        return z85_key.decode("ascii", "replace") in self.credentials

    def apply(self, socket: zmq.Socket[Any]) -> None:
        """Make ``socket`` a CURVE server with this key, authenticated by the ZAP handler.

        Args:
            socket: the socket, before it binds.
        """
        socket.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
        socket.setsockopt(zmq.CURVE_SERVER, 1)
        socket.setsockopt(zmq.CURVE_SECRETKEY, self.secret_key)


class _Allowlist:
    """The credentials provider zmq.auth calls (in its thread) with each connecting key."""

    def __init__(self, security: BrokerSecurity) -> None:
        self.security = security

    def callback(self, domain: str, key: bytes) -> bool:
        return domain == ZAP_DOMAIN and self.security.admits(key)


class ZapHandler:
    """pyzmq's ThreadAuthenticator on ``context``, admitting the keys ``security`` lists; one per context."""

    def __init__(self, context: zmq.Context[Any], security: BrokerSecurity) -> None:
        self.authenticator = ThreadAuthenticator(context)
        self.security = security

    def start(self) -> ZapHandler:
        """Bind the context's ZAP endpoint and start answering; return self."""
        self.authenticator.start()
        self.authenticator.configure_curve_callback(ZAP_DOMAIN, credentials_provider=_Allowlist(self.security))
        return self

    def stop(self) -> None:
        """Stop answering (new handshakes then fail)."""
        self.authenticator.stop()
