"""The environment every start of an implementation gets (barriers/protocol.py ENVIRONMENT documents each name).

One place builds it, so a case, the schema-version stage and the build stage pass the same variables in the
same forms: each DSN in libpq's keyword/value form and again as a `postgresql://` URI, and the client deadline
as a decimal number of seconds.
"""

from __future__ import annotations

from urllib.parse import quote

# The URI's authority and path carry these; every other keyword goes into its query string.
_AUTHORITY = ("user", "password", "host", "port", "dbname")


def dsn_uri(dsn: str) -> str:
    """The same connection as a libpq URI, `postgresql://user:password@host:port/dbname?keyword=value`, every
    part percent-encoded (a socket directory as host included), so a driver that reads only URIs (node-pg's
    `connectionString`, many `DATABASE_URL` readers) reaches the same server, database and role."""
    from psycopg.conninfo import conninfo_to_dict  # here only: a run's controller imports this module, never psycopg

    info = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    user, password = info.get("user", ""), info.get("password")
    credentials = quote(user, safe="") + (f":{quote(password, safe='')}" if password is not None else "")
    host = info.get("host", "")
    host = f"[{host}]" if ":" in host else quote(host, safe="")
    port = f":{info['port']}" if info.get("port") else ""
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in sorted(info.items())
                     if k not in _AUTHORITY)
    return (f"postgresql://{credentials + '@' if credentials else ''}{host}{port}/"
            f"{quote(info.get('dbname', ''), safe='')}" + (f"?{query}" if query else ""))


def seconds_text(seconds: float) -> str:
    """A number of seconds as the environment carries it: a decimal with a fractional part (`2.0`, `0.25`), never
    an exponent, so every caller parses it the same way as a floating-point number."""
    text = f"{float(seconds):.6f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def adapter_environment(runtime_dsn: str, dispatcher_dsn: str, scope: str, deadline_s: float) -> dict[str, str]:
    """The variables of barriers/protocol.py ENVIRONMENT but `CRASHPROOF_BARRIERS` (the process's own start adds
    it: testhost/impl/implementation.py)."""
    return {"CRASHPROOF_RUNTIME_DSN": runtime_dsn, "CRASHPROOF_RUNTIME_DSN_URI": dsn_uri(runtime_dsn),
            "CRASHPROOF_DISPATCHER_DSN": dispatcher_dsn, "CRASHPROOF_DISPATCHER_DSN_URI": dsn_uri(dispatcher_dsn),
            "CRASHPROOF_SCOPE": scope, "CRASHPROOF_DEADLINE_S": seconds_text(deadline_s)}
