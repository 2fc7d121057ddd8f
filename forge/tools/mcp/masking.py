"""The secrets an MCP server's argument list and URL carry, masked for showing.

:func:`masked_args` reads an argument list as a whole (an option's value is the next
argument), :func:`masked_urls` masks a URL's user information, query and fragment, and
:func:`masked_anywhere` the secrets any text may hold whatever their name (a URL's, a token
whose prefix says what it is). The rule is in docs/mcp.md; :mod:`.spec` builds on it (a
spec's redacted form, its secrets kept on edit, an error's message masked).

Invariant: masking is idempotent (a shown form masks to itself: a quoted value keeps its
quotes round the mask), so that what the admin shows, saved or shown again, reads the same.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "••••••"

# A scheme is at most 32 characters: unbounded, each start in a long run of letters (an
# error's text of megabytes) read the whole run looking for "://", and masking took time
# quadratic in it, on the turn's event loop (QA: 100 KB, 26 s; 3 MB, hours).
URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31}://)(?P<userinfo>[^/@\s'\"]*@)?"
    r"(?P<rest>[^\s'\"?#]*)(?P<query>\?[^\s'\"#]*)?(?P<fragment>#[^\s'\"]*)?"
)


# A path segment that reads as a token: 24 or more of the URL-safe alphabet, letters and
# digits both (Zapier's and others' servers put the key in the path:
# ``/api/mcp/s/<key>/mcp``). A word, a name with a dot, a short id are left.
_PATH_TOKEN = re.compile(r"(?<=/)[A-Za-z0-9_-]{24,}(?=/|$)")


def _masked_path(rest: str) -> str:
    host, slash, path = rest.partition("/")

    def token(match: re.Match[str]) -> str:
        found = match[0]
        is_token = any(c.isdigit() for c in found) and any(c.isalpha() for c in found)
        return MASK if is_token else found

    return host + slash + _PATH_TOKEN.sub(token, slash + path)[len(slash) :]


def masked_urls(text: str) -> str:
    """``text`` with every URL's user information, query and fragment masked, and each
    path segment that reads as a token (:data:`_PATH_TOKEN`): where an MCP server's URL
    carries a key (``?api_key=…``, ``https://user:pass@…``, ``#token=…``,
    ``/s/<key>/mcp``), an error that quotes the URL (httpx's do) must not show it to
    users, the model or the logs."""

    def mask(match: re.Match[str]) -> str:
        userinfo = f"{MASK}@" if match["userinfo"] else ""
        query = f"?{MASK}" if match["query"] else ""
        fragment = f"#{MASK}" if match["fragment"] else ""
        rest = _masked_path(match["rest"])
        return f"{match['scheme']}{userinfo}{rest}{query}{fragment}"

    return URL.sub(mask, text)


# A name that names a secret (an option's, an env-style NAME=value's, a header's) is read
# by its parts (:func:`names_secret`). A part that ends with one of these words names a
# secret (``PGPASSWORD``, ``apikey``, ``OAuth``); ``tokens`` is not one (``--max-tokens``
# is a count, and so are most ``…-tokens``).
_SECRET_ENDINGS = (
    "key", "keys", "token", "secret", "secrets", "password", "passwords", "passwd",
    "passphrase", "auth", "authorization", "credential", "credentials", "cookie", "jwt",
    "bearer",
)  # fmt: skip
# Short words that name a secret only as a whole part: ``--pass``, ``DB_PWD``, not
# ``--bypass`` (nor ``OLDPWD``).
_SECRET_PARTS = frozenset({"pass", "pw", "pwd"})
# A part after the secret word that says the value is something else: a count or limit,
# where the secret is (a file, an env variable, stdin), what it is called or what kind it
# is. ``--token-limit 100``, ``--api-key-file /run/k``, ``--password-stdin``,
# ``--secret-name prod``, ``--auth-type oauth`` are not secrets; ``--auth-header X`` is.
_NOT_THE_SECRET = frozenset(
    {
        "limit", "limits", "max", "min", "count", "size", "length", "len", "ttl",
        "timeout", "expiry", "expires", "expiration", "lifetime",
        "file", "path", "dir", "env", "var", "stdin", "cmd", "command", "helper",
        "url", "uri", "endpoint", "host", "port",
        "id", "name", "type", "kind", "mode", "format",
    }
)  # fmt: skip
_NAME_PARTS = re.compile(r"[-_.\s]+|(?<=[a-z0-9])(?=[A-Z])")
# Options whose value is a secret: long (or single-dash, Go-style) options whose name names
# a secret, and the few short ones known to take a key. Other short options are left:
# -p is a port (docker) as often as a password, -t a tty or a timeout.
_SHORT_SECRET_OPTIONS = frozenset({"-k"})
_HEADER_OPTIONS = frozenset({"--header", "--headers", "-H"})
_ENV_OPTIONS = frozenset({"--env", "-e"})
_ENV_STYLE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>.*)", re.DOTALL)
_HEADER = re.compile(
    r"(?P<name>[A-Za-z0-9_-]+)[ \t]*:(?!//)(?P<space>[ \t]*)(?P<value>.*)", re.DOTALL
)
# Tokens whose prefix says what they are, wherever they stand (a positional argument).
# And tokens whose form says so: a JWT (three base64url parts, the first two JSON objects:
# ``eyJ``) and an AWS access key id.
_KNOWN_TOKEN = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{8,}|github_pat_\w{8,}"
    r"|xox[abpr]-[A-Za-z0-9-]{8,}|glpat-[A-Za-z0-9_-]{8,}"
    r"|eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*|(?:AKIA|ASIA)[A-Z0-9]{16}\b)"
)
# ``name=value`` pairs inside an argument: a libpq string (``host=db password=x``), an
# ADO.NET or ODBC one (``Server=db;Password=x;``). A value is quoted ('…', "…", {…}; the
# quotes are kept around the mask), or runs to the next ``;`` (or the end) when no ``=``
# comes first (``Password=my pw;``), else to the next space.
_PAIR = re.compile(
    r"(?<![\w.])(?P<name>[A-Za-z_][\w.-]*)[ \t]*=[ \t]*"
    r"(?P<value>'[^']*'|\"[^\"]*\"|\{[^}]*\}"
    r"|[^\s;&'\"]+(?:[ \t]+[^\s;&'\"=]+)*(?=[ \t]*(?:;|$))|[^\s;&'\"]+)"
)
# ``user:password@host`` without a scheme (``admin:pw@db.example.com:5432``). The host must
# read as one: a dotted name ending in letters, an IPv4 address, ``localhost``, or a name
# with a port; so ``npm:lodash@4.17.21`` and ``alpine:3.19@sha256:…`` are not.
_USERINFO = re.compile(
    r"(?<![\w.%+/:@-])(?P<user>[\w.%+-]*):(?P<password>[^\s@/'\"]+)@(?!sha\d+:)"
    r"(?=localhost\b|\d{1,3}(?:\.\d{1,3}){3}\b|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
    r"|[A-Za-z][A-Za-z0-9-]*:\d)"
)


def _secret_part(part: str) -> bool:
    return part in _SECRET_PARTS or part.endswith(_SECRET_ENDINGS)


def names_secret(name: str) -> bool:
    """Whether ``name`` (an option's without its dashes, a variable's, a header's) names
    a secret: split into parts at ``-``, ``_``, ``.`` and a lower-to-upper case change,
    one part ends with a secret word (:data:`_SECRET_ENDINGS`, or is a short one,
    :data:`_SECRET_PARTS`) and no part after it says the value is something else
    (:data:`_NOT_THE_SECRET`). By parts, not by substrings: ``--max-tokens``,
    ``--author``, ``--passthrough``, ``KEYBOARD`` name none."""
    parts = [p.lower() for p in _NAME_PARTS.split(name) if p]
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in _NOT_THE_SECRET:
            return False
        if _secret_part(parts[i]):
            return True
    return False


def _secret_option(option: str) -> bool:
    if option in _SHORT_SECRET_OPTIONS:
        return True
    name = option[2:] if option.startswith("--") else option[1:]
    return option.startswith("-") and len(name) > 1 and names_secret(name)


def _masked_header(value: str, *, any_name: bool) -> str | None:
    """``Name: value`` with the value masked if ``any_name`` or the name names a secret;
    None when ``value`` is not a header (or names none)."""
    match = _HEADER.fullmatch(value)
    if match is None or not match["value"]:
        return None
    # Alone, a header has a space after its colon: ``token-server:latest`` (an image) and
    # ``keycloak:8080`` (a host) are not headers.
    if any_name or (match["space"] and names_secret(match["name"])):
        return f"{match['name']}: {MASK}"
    return None


def _masked_env(value: str) -> str | None:
    match = _ENV_STYLE.fullmatch(value)
    if match is None or not match["value"] or not names_secret(match["name"]):
        return None
    return f"{match['name']}={MASK}"


def masked_anywhere(text: str) -> str:
    """``text`` with the secrets it may hold wherever they stand, whatever names them:
    every URL's (:func:`masked_urls`) and every token whose form says what it is."""
    return _KNOWN_TOKEN.sub(MASK, masked_urls(text))


def _masked_pairs(text: str) -> str:
    def mask(match: re.Match[str]) -> str:
        if not names_secret(match["name"]):
            return match[0]
        value = match["value"]
        shown = f"{value[0]}{MASK}{value[-1]}" if value[0] in "'\"{" else MASK
        return match[0][: match.start("value") - match.start()] + shown

    return _PAIR.sub(mask, text)


def _masked_loose(text: str) -> str:
    """An argument (or an option's value) no rule reads as a whole: the secrets it may
    hold among other things, a pair's, a scheme-less password's, and any text's
    (:func:`masked_anywhere`); URLs first, so a query's pairs are a URL's."""
    text = _masked_pairs(masked_urls(text))
    text = _USERINFO.sub(lambda m: f"{m['user']}:{MASK}@", text)
    return masked_anywhere(text)


def _masked_arg(arg: str, after: str) -> str:
    """One argument masked; ``after`` is the option before it (``""``: none)."""
    if after in _HEADER_OPTIONS:
        return _masked_header(arg, any_name=True) or MASK
    if after and _secret_option(after) and not arg.startswith("-"):
        return MASK
    if arg.startswith("-") and "=" in arg:
        option, _, value = arg.partition("=")
        if option in _HEADER_OPTIONS:
            shown = _masked_header(value, any_name=True) or MASK
        elif _secret_option(option):
            shown = MASK
        elif option in _ENV_OPTIONS:
            shown = _masked_env(value) or _masked_loose(value)
        else:
            shown = (
                _masked_env(value) or _masked_header(value, any_name=False) or _masked_loose(value)
            )
        return f"{option}={shown}"
    return _masked_env(arg) or _masked_header(arg, any_name=False) or _masked_loose(arg)


def masked_args(args: list[Any]) -> list[Any]:
    """``args`` with every secret masked, the argument list read as a whole:

    - a URL anywhere in an argument: its user information, query and fragment
      (:func:`masked_urls`);
    - the value after ``--header``/``-H`` (or ``--header=``): ``Name: ••••••``, the
      name kept; and a ``Name: value`` argument whose name names a secret;
    - a ``NAME=value`` argument (docker's ``-e``, ``--env=``, env-style) whose NAME
      names a secret;
    - the value of an option that names a secret: the argument after it (unless an
      option) or after its ``=``: ``--api-key X``, ``--password=X``, ``-token X``; of
      the short options only ``-k``;
    - in an argument no rule above reads as a whole: the value of a ``name=value`` pair
      whose name names a secret (``host=db password=x``, ``Server=db;Password=x;``),
      and the password of a scheme-less ``user:password@host``;
    - a token whose form says so, wherever it stands: its prefix (``sk-…``, ``ghp_…``,
      ``github_pat_…``, ``xoxb-…``, ``glpat-…``), a JWT, an AWS access key id.

    A name names a secret by its parts (:func:`names_secret`), not by a secret word it
    merely contains."""
    shown: list[Any] = []
    after = ""
    for arg in args:
        if not isinstance(arg, str):
            shown.append(arg)
            after = ""
            continue
        shown.append(_masked_arg(arg, after))
        after = arg if arg.startswith("-") and "=" not in arg else ""
    return shown
