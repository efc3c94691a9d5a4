"""Where the CLI finds the API URL and token.

Precedence, first found wins: command-line flags (``--url``, ``--token``),
the environment (``METALBOOT_URL``, ``METALBOOT_TOKEN``), the config file
(``--config``, ``METALBOOT_CONFIG`` or ``~/.config/metalboot/cli.ini``),
then built-in defaults: ``http://127.0.0.1:6480`` and, for a token, the
admin-token file a local metalboot-server writes into its default state
directory. The config file::

    [metalboot]
    url = http://127.0.0.1:6480
    token = ...
    # or, instead of token:
    token_file = ~/.local/state/metalboot/admin-token
"""

import configparser
import os

from metalboot_framework.cli.client import EXIT_USAGE, CliError

DEFAULT_URL = "http://127.0.0.1:6480"
SECTION = "metalboot"


def default_config_path():
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"),
                                                              ".config")
    return os.path.join(base, "metalboot", "cli.ini")


def default_state_dir():
    """The server's default state dir (same rule as metalboot_framework.conf.default)."""
    if os.environ.get("METALBOOT_STATE_DIR"):
        return os.environ["METALBOOT_STATE_DIR"]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".local", "state")
    return os.path.join(base, "metalboot")


def _read_token_file(path, origin):
    path = os.path.expanduser(path)
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as exc:
        raise CliError(f"cannot read the token file {path} ({origin}): {exc.strerror}",
                       EXIT_USAGE) from None
    if not token:
        raise CliError(f"the token file {path} ({origin}) is empty", EXIT_USAGE)
    return token


def read_config_file(path, explicit):
    """{"url": ..., "token": ...} from an ini file; {} when a default file is absent."""
    if not os.path.exists(path):
        if explicit:
            raise CliError(f"config file {path} does not exist", EXIT_USAGE)
        return {}
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path) as f:
            parser.read_file(f)
    except (OSError, configparser.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else " ".join(str(exc).split())
        raise CliError(f"cannot read config file {path}: {reason}", EXIT_USAGE) from None
    if not parser.has_section(SECTION):
        if parser.defaults():
            section = parser.defaults()
        else:
            raise CliError(f"config file {path} has no [{SECTION}] section", EXIT_USAGE)
    else:
        section = parser[SECTION]
    out = {}
    if section.get("url"):
        out["url"] = section.get("url").strip()
    if section.get("token"):
        out["token"] = section.get("token").strip()
    elif section.get("token_file"):
        out["token"] = _read_token_file(section.get("token_file").strip(),
                                        f"token_file in {path}")
    return out


def resolve(url=None, token=None, config=None):
    """(url, token, where the token came from) by the precedence above."""
    explicit = config is not None or bool(os.environ.get("METALBOOT_CONFIG"))
    path = config or os.environ.get("METALBOOT_CONFIG") or default_config_path()
    from_file = read_config_file(os.path.expanduser(path), explicit)
    url = url or os.environ.get("METALBOOT_URL") or from_file.get("url") or DEFAULT_URL
    if token:
        origin = "--token"
    elif os.environ.get("METALBOOT_TOKEN"):
        token, origin = os.environ["METALBOOT_TOKEN"], "METALBOOT_TOKEN"
    elif from_file.get("token"):
        token, origin = from_file["token"], path
    else:
        token, origin = None, None
        fallback = os.path.join(default_state_dir(), "admin-token")
        if url.rstrip("/") == DEFAULT_URL and os.path.isfile(fallback):
            try:
                with open(fallback) as f:
                    token = f.read().strip() or None
                origin = fallback if token else None
            except OSError:
                token = None
    if not url.startswith(("http://", "https://")):
        raise CliError(f"the API URL must start with http:// or https://, not {url!r}",
                       EXIT_USAGE)
    return url.rstrip("/"), token, origin
