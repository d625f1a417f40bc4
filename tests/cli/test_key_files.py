"""Key files met where users meet them: ``generaldomo keygen`` writes the secret private from its creation and
never through a planted link; ``broker`` and ``bridge`` refuse a key file they cannot use with one line naming it
(exit 2, at once), warn of a secret others may read, and refuse an allowlist directory every user may write to."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_processes import expect, lines, run, spawn

from generaldomo import errors
from generaldomo.io import keys

# reads, as another user, every file that appears in a directory; prints how many it could read
_POLLER = """
import os, sys, time
folder, end = sys.argv[1], time.monotonic() + float(sys.argv[2])
os.setgid(65534); os.setuid(65534)
print("polling", flush=True)
read = 0
while time.monotonic() < end and not os.path.exists(os.path.join(folder, "done")):
    for name in os.listdir(folder):
        if "key_secret" in name:
            try:
                with open(os.path.join(folder, name), "rb") as file:
                    read += b"secret-key" in file.read()
            except OSError:
                pass
print(read)
"""


def test_keygen_writes_secrets_private_from_their_creation(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    folder.mkdir()
    old = os.umask(0)  # the widest umask: the modes come from keygen alone
    try:
        made = run("keygen", "alice", "--dir", str(folder))
    finally:
        os.umask(old)
    assert made.returncode == 0, made.stderr
    public, secret = folder / "alice.key", folder / "alice.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and stat.S_IMODE(public.stat().st_mode) == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="another user polling the directory needs root to become one")
def test_another_user_polling_the_directory_reads_no_fresh_secret() -> None:
    folder = Path(tempfile.mkdtemp(prefix="generaldomo-keys-", dir="/tmp"))  # others may reach /tmp, not tmp_path
    try:
        os.chmod(folder, 0o755)  # others may list it: only the files' modes protect the secrets
        poller = subprocess.Popen(
            [sys.executable, "-c", _POLLER, str(folder), "120"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert poller.stdout is not None and poller.stdout.readline().strip() == "polling"
            old = os.umask(0o022)  # the usual umask, which made the secrets 0644 for a moment
            try:
                for n in range(300):
                    keys.keygen(folder, f"key{n}")
            finally:
                os.umask(old)
        finally:
            (folder / "done").touch()
            out, _ = poller.communicate(timeout=120)
        assert out.strip() == "0"  # not one secret read by the other user
    finally:
        shutil.rmtree(folder)


def test_keygen_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    folder, target = tmp_path / "keys", tmp_path / "planted"
    folder.mkdir()
    (folder / "alice.key_secret").symlink_to(target)  # dangling: keygen would create the target
    refused = run("keygen", "alice", "--dir", str(folder))
    assert refused.returncode == 2 and "alice.key_secret exists" in refused.stderr
    assert not target.exists()
    forced = run("keygen", "alice", "--dir", str(folder), "--force")
    assert forced.returncode == 0, forced.stderr
    assert not target.exists() and not (folder / "alice.key_secret").is_symlink()
    assert stat.S_IMODE((folder / "alice.key_secret").stat().st_mode) == 0o600
    assert keys.load_secret(folder / "alice.key_secret")[0] == keys.load_public(folder / "alice.key")


def _spoiled(keydir: Path) -> Path:
    """The broker's secret certificate with a character Z85 does not have in its secret key."""
    path = keydir / "spoiled.key_secret"
    text = (keydir / "broker.key_secret").read_text()
    line = next(line for line in text.splitlines() if "secret-key" in line)
    path.write_text(text.replace(line, line.replace('"', '"~', 1)[:-2] + '"'))
    os.chmod(path, 0o600)
    return path


@pytest.mark.parametrize("command", ["broker", "bridge"])
def test_a_secret_key_of_invalid_z85_exits_2_naming_the_file(keydir: Path, command: str) -> None:
    spoiled = _spoiled(keydir)
    flags = ["--bind", "tcp://127.0.0.1:*"] if command == "broker" else ["--server", "tcp://127.0.0.1:*"]
    if command == "bridge":
        flags += ["--broker", "tcp://127.0.0.1:9"]
    done = run(command, *flags, "--curve-secret", str(spoiled), "--clients", str(keydir / "clients"), timeout=60)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert str(spoiled) in line and "secret-key" in line


def test_a_secret_key_others_may_read_is_used_with_a_warning(keydir: Path, processes) -> None:
    secret = keydir / "broker.key_secret"
    os.chmod(secret, 0o644)
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", "--curve-secret", str(secret),
                   "--clients", str(keydir / "clients"))  # fmt: skip
    found = lines(broker.stderr)
    warning = expect(found, "readable or writable by others")
    assert str(secret) in warning and "0644" in warning
    expect(lines(broker.stdout), "generaldomo broker: router")


def test_an_allowlist_directory_every_user_may_write_to_is_refused(keydir: Path) -> None:
    os.chmod(keydir / "clients", 0o777)
    done = run("broker", "--bind", "tcp://127.0.0.1:*", "--curve-secret", str(keydir / "broker.key_secret"),
               "--clients", str(keydir / "clients"), timeout=60)  # fmt: skip
    assert done.returncode == 2 and str(keydir / "clients") in done.stderr and "every user" in done.stderr


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize(
    "argv",
    [
        ["client", "--connect", "tcp://127.0.0.1:9", "--file", "{}", "echo"],
        ["status", "--config", "{}"],
        ["broker", "--bind", "tcp://127.0.0.1:*", "--curve-secret", "{}", "--clients", "{keys}"],
        ["client", "--connect", "tcp://127.0.0.1:9", "--curve-key", "{}", "--curve-server-key", "{keys}/../broker.key",
         "echo"],
    ],
    ids=["payload", "config", "secret", "peer-key"],
)  # fmt: skip
def test_a_fifo_or_a_device_given_as_a_file_is_refused_at_once(
    keydir: Path, tmp_path: Path, argv: list[str], special: str
) -> None:
    path = tmp_path / "fifo"
    if special == "fifo":
        os.mkfifo(path, 0o600)  # nobody writes to it: reading it would wait for ever
    else:
        path = Path(special)  # reading it would never end
    args = [word.replace("{keys}", str(keydir / "clients")).replace("{}", str(path)) for word in argv]
    done = run(*args, timeout=60)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert str(path) in line and "not a regular file" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="a link of another user needs root to make")
def test_a_link_of_another_user_to_a_secret_is_refused(keydir: Path, tmp_path: Path) -> None:
    link = tmp_path / "planted.key_secret"
    link.symlink_to(keydir / "broker.key_secret")
    os.lchown(link, 65534, 65534)
    with pytest.raises(errors.KeyFileError, match="symbolic link of another user"):
        keys.load_secret(link)
    os.lchown(link, 0, 0)  # a root-owned link (a container runtime's mounted secret) is followed
    assert keys.load_secret(link) == keys.load_secret(keydir / "broker.key_secret")
