"""What leaves the machine in a run folder or a bundle has its secrets removed: the values of
secret-looking environment variables and the credentials inside URLs."""

from __future__ import annotations

import os
import re

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
REDACTED = "<redacted>"
# scheme://user:password@host or scheme://token@host: the userinfo is a credential
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def redact_value(value: str) -> str:
    """``value`` with credentials inside URLs replaced (``https://user:pass@host`` -> ``https://<redacted>@host``)."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", value)


def redact_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with the values of secret-looking names (TOKEN, KEY, SECRET, PASSWORD, ...)
    replaced and URL credentials removed from every other value."""
    env = dict(os.environ if env is None else env)
    out = {}
    for name in sorted(env):
        upper = name.upper()
        out[name] = REDACTED if any(w in upper for w in SECRET_WORDS) else redact_value(env[name])
    return out
