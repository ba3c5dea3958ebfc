"""Which requests may reach the server: its own names in `Host`, allowed origins for browsers.

A web page the user visits can send requests to 127.0.0.1 from the user's browser. Two
checks stop it from using the server, without changing anything for TF Serving's clients
(which send no `Origin` and name the server in `Host`):

- Host. Under DNS rebinding, attacker.example is made to resolve to 127.0.0.1, and its
  page then reads the server's answers as same-origin; its requests still carry
  `Host: attacker.example`. A request is served only if its Host is an IP address, a
  `localhost` name, this machine's name, or a name given with --allowed_hosts (`*`: any,
  for a reverse proxy that checks names itself). A server bound beyond the loopback
  (`--host 0.0.0.0`) takes any Host unless --allowed_hosts is given.
- Origin. Browsers send `Origin` with every cross-origin request and every POST. A
  request whose origin is not the server's own (its scheme aside: a proxy may add TLS) is
  refused unless --allowed_origins lists it (`*`: any); an allowed one gets the CORS
  headers that let its page read the answer, and its preflight (`OPTIONS`) is answered.
  A POST from a browser must also say `Content-Type: application/json`: a form or
  `text/plain` POST is how a page sends a request without a preflight.

Refusals are 403 (415 for the content type), in TF Serving's `{"error": ...}` form.
"""

import dataclasses
import ipaddress
import socket
import urllib.parse

from app.serving.rest_api import ServingError

ANY = "*"
# What an allowed cross-origin page may send, and how long its browser may remember so.
CORS_METHODS = "GET, POST"
CORS_HEADERS = "Content-Type"
CORS_MAX_AGE_SECONDS = "600"


def _names(text):
    """The comma-separated names of a flag, lowercased, without empty ones."""
    return frozenset(name.strip().lower().rstrip(".") for name in (text or "").split(",") if name.strip())


def split_host(host):
    """The name or address in a Host header, without its port or brackets, lowercased."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8501
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return host.rstrip(".")


def _is_loopback(host):
    """Whether binding `host` serves this machine only (127.0.0.1, ::1, localhost)."""
    name = split_host(host or "")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _is_address(name):
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class OriginPolicy:
    """The server's --allowed_hosts and --allowed_origins (comma-separated; `*` for any)."""

    allowed_hosts: frozenset = frozenset()
    allowed_origins: frozenset = frozenset()
    own_names: frozenset = frozenset()  # this machine's names, and the --host it binds

    @classmethod
    def from_flags(cls, allowed_hosts="", allowed_origins="", bind_host="127.0.0.1"):
        """The policy of the server's flags. A server bound to more than the loopback
        (`--host 0.0.0.0`) was asked to serve other machines, under names it cannot know
        (a compose service's, a cluster's): it takes any Host unless --allowed_hosts is
        given, as Jupyter does; origins are checked either way."""
        own = {socket.gethostname().lower(), socket.getfqdn().lower(), split_host(bind_host or "")}
        origins = (origin.strip().rstrip("/") for origin in (allowed_origins or "").split(","))
        origins = frozenset(origin for origin in origins if origin)
        hosts = _names(allowed_hosts)
        if not hosts and not _is_loopback(bind_host):
            hosts = frozenset({ANY})
        return cls(hosts, origins, frozenset(name for name in own if name))

    def check_host(self, host):
        """Raises a 403 ServingError unless `host` (the Host header; None if absent) names this server."""
        if host is None or ANY in self.allowed_hosts:
            return
        name = split_host(host)
        if (
            _is_address(name)
            or name == "localhost"
            or name.endswith(".localhost")
            or name in self.own_names
            or name in self.allowed_hosts
        ):
            return
        raise ServingError(
            f"Host {host!r} is not a name of this server; to serve requests that name it, start the server "
            f"with --allowed_hosts {name}",
            status=403,
        )

    def cross_origin(self, origin, host):
        """Whether a request with this Origin header (None if absent) comes from another
        site's page; raises a 403 ServingError if that page is not allowed."""
        if origin is None or _same_site(origin, host):
            return False
        if ANY in self.allowed_origins or origin.rstrip("/") in self.allowed_origins:
            return True
        raise ServingError(
            f"cross-origin request from {origin!r} refused; to allow that page, start the server with "
            f"--allowed_origins {origin}",
            status=403,
        )

    def cors_headers(self, origin):
        """The headers that let an allowed page read the answer."""
        return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}

    def preflight_headers(self, origin):
        return {
            **self.cors_headers(origin),
            "Access-Control-Allow-Methods": CORS_METHODS,
            "Access-Control-Allow-Headers": CORS_HEADERS,
            "Access-Control-Max-Age": CORS_MAX_AGE_SECONDS,
        }


def _same_site(origin, host):
    """Whether `origin` (scheme://name[:port]) is the server's own address as `host` names it.
    Ports are compared as written, the scheme's default where none is."""
    if host is None:
        return False
    parsed = urllib.parse.urlsplit(origin)
    if not parsed.hostname:
        return False  # "null": a sandboxed frame or a file
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    try:
        origin_port = parsed.port or default
    except ValueError:
        return False
    host_name = split_host(host)
    host_port = host.rsplit(":", 1)[1] if host.count(":") == 1 or host.startswith("[") and "]:" in host else None
    # Behind a proxy that adds TLS, the page is https://name while the server hears Host: name.
    same_port = host_port is None and origin_port in (80, 443) or str(origin_port) == host_port
    return parsed.hostname.lower().rstrip(".") == host_name and same_port


def is_json(content_type):
    """Whether a Content-Type is JSON (application/json, or a +json type)."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))
