"""Who may talk to the gRPC API: TLS (optionally mutual) and bearer tokens from a token file.

Two independent layers, each optional:

* **TLS** (`TlsConfig`): the server's certificate and key, and optionally a client CA; with a
  client CA every client must present a certificate it signed (mTLS), checked by gRPC during the
  handshake, before any RPC exists.
* **Tokens** (`TokenTable`, `TokenAuthInterceptor`): ``authorization: Bearer TOKEN`` on every
  call; a token maps to the namespaces its holder may act in.  The interceptor turns a missing or
  unknown token into UNAUTHENTICATED before the call reaches any servicer, and hands the matching
  `Caller` to the servicer (`current_caller`).  The namespace check itself (PERMISSION_DENIED) is
  the service layer's, which knows what namespace each request is about.

Health checks and reflection stay open: a load balancer or a kubelet probing health has no token,
and reflection describes only the API's shape, which is public (proto/ is in the repository).

Tokens are secrets: none is ever logged, echoed in an error, or kept longer than needed.  Only
their SHA-256 digests are held, compared in constant time (`hmac.compare_digest`, against every
entry, with no early exit), so response timing does not reveal how much of a guess was right.
A caller is named in logs by where its token is defined (``tokens.txt:3``), never by the token.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kai_ray.rpc.caller import ANYONE, Caller
from kai_ray.rpc.handlers import Behavior, replace_behavior, with_prelude

__all__ = [
    "OPEN_METHOD_PREFIXES",
    "AuthConfigError",
    "TlsConfig",
    "TokenAuthInterceptor",
    "TokenTable",
    "bound_caller",
    "current_caller",
    "load_token_file",
]

log = logging.getLogger(__name__)

#: Services callable without a token: health (probes and load balancers carry none) and
#: reflection (the API's shape is public).  Matched as full-method-name prefixes.
OPEN_METHOD_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)

_AUTHORIZATION = "authorization"
_BEARER = "bearer "
# Kubernetes namespace names are DNS-1123 labels; anything else in a token file is a typo.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class AuthConfigError(ValueError):
    """A TLS file or the token file cannot be used; the message names the file (and line)."""


# ---------------------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class TlsConfig:
    """``--tls-cert``, ``--tls-key`` and, for mutual TLS, ``--tls-client-ca`` (all PEM files)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def server_credentials(self) -> Any:
        """Read the files now (a typo fails at start-up, not at the first handshake) and build
        ``grpc.ssl_server_credentials``; with a client CA, clients without a certificate signed by
        it are refused during the handshake (``require_client_auth``)."""
        cert = _read_pem(self.cert, "--tls-cert", "CERTIFICATE")
        key = _read_pem(self.key, "--tls-key", "PRIVATE KEY")
        ca = _read_pem(self.client_ca, "--tls-client-ca", "CERTIFICATE") if self.client_ca else None
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
        )


def _read_pem(path: Path, flag: str, kind: str) -> bytes:
    """The file's bytes, after checking it exists and looks like PEM holding a ``kind`` block:
    gRPC itself reports a bad file only as a failed handshake, far from its cause."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise AuthConfigError(f"{flag} {path}: {error.strerror or error}") from None
    if b"-----BEGIN " not in data or kind.encode() not in data:
        raise AuthConfigError(f"{flag} {path}: not a PEM file with a {kind} block")
    return data


# ---------------------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    caller: Caller


class TokenTable:
    """The tokens of a token file, by SHA-256 digest, each with the `Caller` it authenticates as.

    Built by `load_token_file` or `TokenTable.parse`; immutable, so it is shared by every
    server thread without locking.
    """

    def __init__(self, entries: Sequence[tuple[str, Caller]]) -> None:
        self._entries = tuple(_Entry(_digest(token), caller) for token, caller in entries)

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str) -> Caller | None:
        """The caller ``token`` authenticates as, or None.

        Every entry is compared, in constant time, whatever matches: the time taken depends on
        the number of tokens, never on the token presented.
        """
        presented = _digest(token)
        found: Caller | None = None
        for entry in self._entries:
            if hmac.compare_digest(presented, entry.digest):
                found = entry.caller
        return found

    @classmethod
    def parse(cls, text: str, source: str = "<tokens>") -> TokenTable:
        """Parse the token file format; errors name ``source:LINE`` and never quote the line
        (it holds a secret).

        One token per line: ``TOKEN NAMESPACES``, NAMESPACES a comma list (``team-a,team-b``) or
        ``*`` (every namespace).  Blank lines and lines starting with ``#`` are ignored.
        """
        entries: list[tuple[str, Caller]] = []
        seen: dict[bytes, int] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{source}:{number}"
            fields = line.split()
            if len(fields) != 2:
                raise AuthConfigError(
                    f"{where}: expected 'TOKEN NAMESPACES' (two fields separated by spaces), "
                    f"found {len(fields)} field(s)"
                )
            token, namespaces = fields
            digest = _digest(token)
            if digest in seen:
                raise AuthConfigError(f"{where}: the same token as line {seen[digest]}")
            seen[digest] = number
            entries.append((token, Caller(_parse_namespaces(namespaces, where), name=where)))
        return cls(entries)


def _parse_namespaces(text: str, where: str) -> frozenset[str] | None:
    if text == "*":
        return None
    names = text.split(",")
    for name in names:
        if name == "*":
            raise AuthConfigError(f"{where}: '*' must stand alone, not in a list of namespaces")
        if not _NAMESPACE.fullmatch(name):
            raise AuthConfigError(
                f"{where}: {name!r} is not a namespace name (lowercase letters, digits and '-', "
                "at most 63); write NAMESPACES as a comma list without spaces, or '*'"
            )
    return frozenset(names)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def load_token_file(path: Path) -> TokenTable:
    """Read ``--token-file``; an unreadable, malformed or empty file is an `AuthConfigError`.

    An empty table would refuse every call, which is never what was meant.
    """
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise AuthConfigError(f"--token-file {path}: {reason or error}") from None
    table = TokenTable.parse(text, source=str(path))
    if not len(table):
        raise AuthConfigError(f"--token-file {path}: no tokens (only blank lines and comments)")
    return table


# ---------------------------------------------------------------------------------------- caller

_CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("kai_ray_grpc_caller", default=ANYONE)


def current_caller() -> Caller:
    """The caller of the RPC being served (in its task); `ANYONE` on a server without tokens.

    Read it at the start of a handler, before returning a response iterator: the binding lasts
    for the handler call (`bound_caller`).
    """
    return _CALLER.get()


@contextlib.contextmanager
def bound_caller(caller: Caller) -> Iterator[None]:
    """Make ``caller`` the `current_caller` for the duration of the block (one handler call)."""
    token = _CALLER.set(caller)
    try:
        yield
    finally:
        _CALLER.reset(token)


# ---------------------------------------------------------------------------------------- interceptor


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """Requires a known bearer token on every call except `OPEN_METHOD_PREFIXES`.

    Runs for every service on the server, so a service added later is protected without opting
    in.  The token is checked when the call arrives (it is in the headers); the handler is then
    wrapped so that it runs with the token's `Caller` bound (`current_caller`).  A refused call
    gets a handler of the same shape that aborts with UNAUTHENTICATED, so the client sees a clean
    status for unary and streaming methods alike.
    """

    def __init__(self, tokens: TokenTable) -> None:
        self._tokens = tokens

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        caller, problem = self._authenticate(handler_call_details.invocation_metadata or ())
        if caller is None:
            return replace_behavior(handler, lambda _behavior: _refuse(method, problem))
        return replace_behavior(handler, lambda behavior: _with_caller(behavior, caller))

    def _authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> tuple[Caller | None, str]:
        """(caller, "") or (None, why not); the reason never contains the token."""
        values = [value for key, value in metadata if key == _AUTHORIZATION]
        if not values:
            return None, "no 'authorization: Bearer TOKEN' metadata"
        if len(values) > 1:
            return None, "more than one 'authorization' metadata entry"
        value = values[0]
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not value.lower().startswith(_BEARER):
            return None, "the 'authorization' metadata is not 'Bearer TOKEN'"
        caller = self._tokens.lookup(value[len(_BEARER) :].strip())
        if caller is None:
            return None, "unknown token"
        return caller, ""


def _with_caller(behavior: Behavior, caller: Caller) -> Behavior:
    """Each RPC is its own task, so the binding is that call's own."""

    async def bind(_request: Any, _context: Any) -> contextlib.AbstractContextManager[None]:
        return bound_caller(caller)

    return with_prelude(behavior, bind)


def _refuse(method: str, problem: str) -> Behavior:
    async def refuse(_request: Any, context: Any) -> Any:
        # Logged per call without the metadata; RepeatFilter (server/logs.py) folds floods.
        log.warning("refused %s from %s: %s", method, context.peer(), problem)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)

    return refuse
