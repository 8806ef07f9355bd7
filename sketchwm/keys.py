"""Watermark keys: one secret, everything else derived with HMAC-SHA256 and domain separation.

Paper §4.1 splits the key into k = (k_sk, k_dir): the sketch key k_sk drives the Count-Sketch
hash and sign functions, the direction key k_dir the Rademacher direction u_k. Both, and every
other table a scheme needs, are derived here as ``HMAC-SHA256(secret, "sketchwm/v1/" + domain)``.
The secret itself is never printed, logged or stored in results: only its fingerprint is.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .errors import KeyError_

__all__ = ["WatermarkKey", "MIN_SECRET_BYTES", "KEY_ENV", "KEY_FILE_ENV", "INSECURE_PERMS_ENV"]

MIN_SECRET_BYTES = 16
_PREFIX = b"sketchwm/v1/"
#: environment variable holding a hex secret (so it never appears in argv, shell history or ``ps``)
KEY_ENV = "SKETCHWM_KEY"
#: environment variable naming a key file (used when ``--key`` is not given)
KEY_FILE_ENV = "SKETCHWM_KEY_FILE"
#: set to 1 to accept group/world-readable key files (as ``--insecure-key-permissions``)
INSECURE_PERMS_ENV = "SKETCHWM_INSECURE_KEY_PERMISSIONS"


def _looks_hex(s: str) -> bool:
    s = s.strip()
    return len(s) >= 2 * MIN_SECRET_BYTES and all(c in "0123456789abcdefABCDEF" for c in s)


@dataclass(frozen=True)
class WatermarkKey:
    """A secret watermark key.

    Attributes:
        secret: the raw secret, >= 16 bytes. Hidden from ``repr``.

    Raises:
        KeyError_: if the secret is shorter than 16 bytes or not bytes.
    """

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.secret, (bytes, bytearray)):
            raise KeyError_("watermark key secret must be bytes")
        if len(self.secret) < MIN_SECRET_BYTES:
            raise KeyError_(
                f"watermark key secret is {len(self.secret)} bytes; at least {MIN_SECRET_BYTES} are required"
            )

    # ------------------------------------------------------------------ construction
    @classmethod
    def generate(cls, nbytes: int = 32) -> "WatermarkKey":
        """A fresh random key from the OS CSPRNG (``secrets.token_bytes``)."""
        return cls(secrets.token_bytes(nbytes))

    @classmethod
    def from_hex(cls, text: str) -> "WatermarkKey":
        """Parse a hex-encoded secret (whitespace ignored).

        Raises:
            KeyError_: empty or non-hex text, or fewer than 16 bytes.
        """
        cleaned = "".join(str(text).split())
        if not cleaned:
            raise KeyError_("watermark key is empty")
        try:
            raw = bytes.fromhex(cleaned)
        except ValueError:
            raise KeyError_("watermark key is not valid hex") from None
        return cls(raw)

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, allow_insecure: bool | None = None) -> "WatermarkKey":
        """Read a key file written by :meth:`save` (hex secret on one line).

        Like ssh, a key file that the group or others can read or write is refused: the secret may
        already be exposed. ``allow_insecure=True`` (or ``SKETCHWM_INSECURE_KEY_PERMISSIONS=1``)
        accepts it anyway.

        Raises:
            KeyError_: the file is missing, a directory, group/world-accessible, unreadable or
                malformed (the message names the path, never its content).
        """
        p = Path(path)
        if not p.exists():
            raise KeyError_(f"key file not found: {p}")
        if p.is_dir():
            raise KeyError_(f"key file {p} is a directory: pass the key file written by `sketchwm keygen`")
        if allow_insecure is None:
            allow_insecure = os.environ.get(INSECURE_PERMS_ENV, "") not in ("", "0")
        mode = stat.S_IMODE(p.stat().st_mode)
        if mode & 0o077 and not allow_insecure and os.name == "posix":
            raise KeyError_(
                f"key file {p} has permissions {mode:04o}, readable by others: run `chmod 600 {p}` "
                "(or pass --insecure-key-permissions)"
            )
        try:
            text = p.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            raise KeyError_(f"key file is unreadable or not ASCII hex: {p}") from None
        try:
            return cls.from_hex(text)
        except KeyError_ as exc:
            raise KeyError_(f"malformed key file {p}: {exc}") from None

    @classmethod
    def load(cls, spec: "str | os.PathLike | WatermarkKey | None", *, allow_hex: bool = True,
             allow_insecure: bool | None = None) -> "WatermarkKey":
        """Accept a key object, a key-file path, or a hex string; None reads the environment.

        With ``spec=None`` the key comes from ``$SKETCHWM_KEY`` (hex secret) or
        ``$SKETCHWM_KEY_FILE`` (a key-file path), in that order.

        Args:
            allow_hex: False refuses a hex secret in ``spec`` (the CLI: argv is visible in ``ps``
                and shell history).
            allow_insecure: passed to :meth:`from_file`.

        Raises:
            KeyError_: no key anywhere, a hex secret where not allowed, or a key that cannot be parsed.
        """
        if spec is None:
            env_hex, env_file = os.environ.get(KEY_ENV), os.environ.get(KEY_FILE_ENV)
            if env_hex:
                try:
                    return cls.from_hex(env_hex)
                except KeyError_ as exc:
                    raise KeyError_(f"${KEY_ENV}: {exc}") from None
            if env_file:
                return cls.from_file(env_file, allow_insecure=allow_insecure)
            raise KeyError_(f"a watermark key is required: pass --key KEYFILE, or set ${KEY_FILE_ENV} or ${KEY_ENV}")
        if isinstance(spec, WatermarkKey):
            return spec
        if isinstance(spec, (bytes, bytearray)):
            return cls(bytes(spec))
        s = str(spec)
        if Path(s).exists():
            return cls.from_file(s, allow_insecure=allow_insecure)
        if _looks_hex(s):
            if not allow_hex:
                raise KeyError_(f"refusing a secret on the command line (visible in ps and shell history): "
                                f"put it in a key file (mode 0600) or in ${KEY_ENV}")
            return cls.from_hex(s)
        raise KeyError_(f"key file not found: {s}")

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the hex secret to ``path`` with mode 0600.

        The file is written atomically (temporary file with mode 0600 in the same directory, then
        renamed), so an interrupted ``keygen --force`` never destroys the previous key.

        Raises:
            KeyError_: if the file exists and ``overwrite`` is False (never clobber a key), or its
                directory does not exist or is not writable.
        """
        from .errors import InputError
        from .io import atomic_write

        p = Path(path)
        if p.exists() and not overwrite:
            raise KeyError_(f"refusing to overwrite existing key file: {p} (pass --force to replace it)")
        try:
            with atomic_write(p, perms=stat.S_IRUSR | stat.S_IWUSR, overwrite=overwrite) as fh:
                fh.write(self.secret.hex() + "\n")
        except InputError as exc:
            raise KeyError_(str(exc)) from None
        return p

    # ------------------------------------------------------------------ derivation
    def derive(self, domain: str, nbytes: int = 32) -> bytes:
        """HMAC-SHA256(secret, "sketchwm/v1/" + domain), expanded to ``nbytes`` (HKDF-style counter).

        Args:
            domain: a label such as ``"k_sk"``, ``"k_dir"``, ``"count-sketch/bucket/row=0"``.
            nbytes: output length in bytes (1..1024).
        """
        if not 1 <= nbytes <= 1024:
            raise ValueError("nbytes must be in [1, 1024]")
        out = b""
        counter = 0
        msg = _PREFIX + domain.encode("utf-8")
        while len(out) < nbytes:
            out += hmac.new(self.secret, msg + b"|" + counter.to_bytes(4, "big"), hashlib.sha256).digest()
            counter += 1
        return out[:nbytes]

    def subkey(self, domain: str) -> "WatermarkKey":
        """A derived key, e.g. ``key.subkey("k_sk")`` and ``key.subkey("k_dir")`` (paper §4.1)."""
        return WatermarkKey(self.derive("subkey/" + domain, 32))

    def seed(self, domain: str) -> int:
        """A 63-bit integer seed for :mod:`sketchwm.prf` tables, derived for ``domain``."""
        return int.from_bytes(self.derive("seed/" + domain, 8), "big") & 0x7FFFFFFFFFFFFFFF

    @property
    def fingerprint(self) -> str:
        """16 hex chars identifying the key (HMAC of a public label); safe to print and store."""
        return self.derive("fingerprint", 8).hex()

    def __repr__(self) -> str:  # never show the secret
        return f"WatermarkKey(fingerprint={self.fingerprint})"

    __str__ = __repr__
