"""A checkpoint folder's small files read as untrusted: bounded JSON, settings checked by type,
range and finiteness, paths kept inside the folder, vocabularies checked before they are used.

Every refusal is one `UserError` naming the file and the value.
"""

import json
import math
import os

from keras_attn.errors import UserError

# Larger than any real file of its kind (a 250,000-piece `vocab.json` is about 6 MB), small enough
# that reading one is cheap.
MAX_SETTINGS_BYTES = 2**20
MAX_VOCABULARY_BYTES = 16 * 2**20
# The largest size a setting may claim: every size is also checked against the weights' shapes.
MAX_SIZE = 2**31 - 1


def shown(value, most=80):
    """`repr(value)`, cut to `most` characters: what a one-line refusal quotes of a file's value."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def file_size(path, limit):
    """The size of the file `path`, refused in one line if it is missing or larger than `limit`.

    Args:
        path: str. The file.
        limit: int. The most bytes a file of its kind holds.

    Returns:
        An int: the file's size in bytes.

    Raises:
        UserError: when `path` cannot be read (missing, or not allowed), is not a file (a folder,
            a device, a pipe) or is larger than `limit`.
    """
    try:
        size = os.stat(path).st_size
    except OSError as error:
        raise UserError(f"{path}: not readable ({error.strerror})") from None
    if not os.path.isfile(path):
        raise UserError(f"{path}: not a file")
    folder, name = os.path.split(os.path.normpath(path))
    inside(folder or ".", name, path)  # a link out of the folder is refused
    if size > limit:
        raise UserError(f"{path}: {size:,} bytes, more than the {limit:,} a file of its kind holds")
    return size


def read_bytes(path, limit):
    """The bytes of the file `path`, at most `limit` of them.

    Args:
        path: str. The file.
        limit: int. The most bytes read; a larger file is refused.

    Returns:
        The file's content, as bytes.

    Raises:
        UserError: when `path` cannot be read, is not a file or is larger than `limit`.
    """
    file_size(path, limit)
    try:
        with open(path, "rb") as file:
            return file.read(limit + 1)[:limit]
    except OSError as error:
        raise UserError(f"{path}: not readable ({error.strerror})") from None


def read_text(path, limit):
    """The UTF-8 text of the file `path`; invalid UTF-8 is refused naming its line.

    Args:
        path: str. The file.
        limit: int. The most bytes read; a larger file is refused.

    Returns:
        A str: the file's text.

    Raises:
        UserError: when `path` cannot be read, is not a file, is larger than `limit`, or is not
            valid UTF-8 (naming the first line that is not).
    """
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: invalid UTF-8 ({error.reason})") from None


def read_json(path, limit=MAX_SETTINGS_BYTES):
    """The JSON file `path` (at most `limit` bytes), refused in one line if it is not JSON.

    Args:
        path: str. The file.
        limit: int. The most bytes read; a larger file is refused. Defaults to
            `MAX_SETTINGS_BYTES` (1 MiB).

    Returns:
        The value the file holds: a dict, list, str, int, float, bool or None.

    Raises:
        UserError: when `path` cannot be read, is not a file, is larger than `limit`, is not
            valid UTF-8, is not JSON, or is nested deeper than Python's recursion limit allows.
    """
    text = read_text(path, limit)
    try:
        return json.loads(text)
    except RecursionError:
        raise UserError(f"{path}: nested deeper than a settings file is") from None
    except ValueError as error:
        raise UserError(f"{path}: not JSON ({error})") from None


def read_settings(path):
    """The JSON object of settings in `path`, as `Settings`.

    Args:
        path: str. The settings file (at most `MAX_SETTINGS_BYTES`, 1 MiB).

    Returns:
        A `Settings` of its values, `path` its origin.

    Raises:
        UserError: when `path` cannot be read as JSON (see `read_json`) or holds something other
            than an object.
    """
    values = read_json(path)
    if not isinstance(values, dict):
        raise UserError(f"{path}: not a JSON object of settings")
    return Settings(values, path)


_MISSING = object()


class Settings:
    """A settings file's values, each read with its type and range checked.

    Each reading method refuses a value of another type or out of its range in one `UserError`
    that names the file, the setting and the value. Each argument is also an attribute of the
    same name.

    Args:
        values: dict. The settings, `{name: value}`, as read from JSON.
        origin: str. The file they come from, named in every refusal.

    Example:

        >>> settings = Settings({"hidden_size": 32, "layer_norm_eps": float("nan")}, "config.json")
        >>> settings.whole("hidden_size")
        32
        >>> settings.number("layer_norm_eps", above=0, below=1)
        Traceback (most recent call last):
        ...
        keras_attn.errors.UserError: config.json: layer_norm_eps nan, where a finite number ...
    """

    def __init__(self, values, origin):
        self.values, self.origin = values, origin

    def __contains__(self, name):
        return name in self.values

    def _get(self, name, default):
        if name in self.values:
            return self.values[name]
        if default is _MISSING:
            raise UserError(f"{self.origin}: no {name}")
        return default

    def refuse(self, name, value, belongs):
        """Raises the one-line `UserError` of a setting whose value is not what `belongs`.

        Args:
            name: str. The setting.
            value: object. The value the file holds for it.
            belongs: str. What would belong there, e.g. `"true or false"`.

        Raises:
            UserError: always, naming the file, `name` and `value`.
        """
        raise UserError(f"{self.origin}: {name} {shown(value)}, where {belongs} belongs")

    def whole(self, name, low=1, high=MAX_SIZE, default=_MISSING):
        """The whole number `name`, from `low` to `high`.

        Args:
            name: str. The setting.
            low: int. The smallest value read. Defaults to 1.
            high: int. The largest value read. Defaults to `MAX_SIZE` (2**31 - 1).
            default: int. The value when the file has no `name`, checked as a value of the
                file would be. Without it, a file without `name` is refused.

        Returns:
            An int.

        Raises:
            UserError: when `name` is missing (without a `default`), not a whole number (a bool,
                a float such as `2.0` and a string are refused) or not from `low` to `high`.
        """
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.refuse(name, value, f"a whole number from {low} to {high:,}")
        return value

    def number(self, name, above=None, below=None, at_least=None, default=_MISSING):
        """The finite number `name`, above `above` (or at least `at_least`) and below `below`.

        Args:
            name: str. The setting.
            above: float. A bound the value must exceed. Defaults to None (no such bound).
            below: float. A bound the value must stay under. Defaults to None (no such bound).
            at_least: float. The smallest value read. Defaults to None (no such bound).
            default: float. The value when the file has no `name`, checked as a value of the
                file would be. Without it, a file without `name` is refused.

        Returns:
            A float.

        Raises:
            UserError: when `name` is missing (without a `default`), not a number (a bool and a
                string are refused), NaN or infinite, or outside its bounds.
        """
        value = self._get(name, default)
        bounds = [f"above {above}"] if above is not None else []
        bounds += [f"at least {at_least}"] if at_least is not None else []
        bounds += [f"below {below}"] if below is not None else []
        wrong = isinstance(value, bool) or not isinstance(value, (int, float))
        if not wrong:
            wrong = (
                not _finite(value)
                or (above is not None and value <= above)
                or (at_least is not None and value < at_least)
                or (below is not None and value >= below)
            )
        if wrong:
            self.refuse(name, value, " ".join(["a finite number", " and ".join(bounds)]).strip())
        return float(value)

    def boolean(self, name, default=_MISSING):
        """The JSON boolean `name` (`true` or `false`; a string such as "no" is refused).

        Args:
            name: str. The setting.
            default: bool. The value when the file has no `name`. Without it, a file without
                `name` is refused.

        Returns:
            A bool.

        Raises:
            UserError: when `name` is missing (without a `default`) or not `true` or `false`.
        """
        value = self._get(name, default)
        if not isinstance(value, bool):
            self.refuse(name, value, "true or false")
        return value

    def choice(self, name, choices, default=_MISSING):
        """`name`, one of `choices`.

        Args:
            name: str. The setting.
            choices: tuple or dict of str. The strings read (a dict's keys), listed in a refusal.
            default: str. The value when the file has no `name`, checked as a value of the file
                would be. Without it, a file without `name` is refused.

        Returns:
            A str, one of `choices`.

        Raises:
            UserError: when `name` is missing (without a `default`), or not a string of
                `choices`.
        """
        value = self._get(name, default)
        if not isinstance(value, str) or value not in choices:
            self.refuse(name, value, f"one of {', '.join(choices)}")
        return value

    def equal(self, name, expected, why, default=_MISSING):
        """`name`, refused unless it is `expected` (`why`: what reads only that value).

        Args:
            name: str. The setting.
            expected: int, float, bool or str. The only value read; a value equal to it of
                another type (`1.0` where `1` is expected) is refused too.
            why: str. What reads only that value, said in a refusal.
            default: int, float, bool or str. The value when the file has no `name`, checked
                as a value of the file would be. Without it, a file without `name` is refused.

        Returns:
            `expected`.

        Raises:
            UserError: when `name` is missing (without a `default`) or is not `expected`.
        """
        value = self._get(name, default)
        if value != expected or type(value) is not type(expected):
            raise UserError(f"{self.origin}: {name} {value!r}; {why}")
        return value


def inside(folder, name, what):
    """The path of the file `name` in `folder`, refused unless it stays there.

    `name` must be a plain relative path (no absolute path, no `..`), and the file it names, its
    symbolic links followed, must lie in the folder, or in the `blobs/` folder beside a Hugging
    Face cache's `snapshots/` (whose files are links into it).

    Args:
        folder: str. The checkpoint folder.
        name: str. The file's name, as a file of the folder gives it (e.g. a shard in
            `model.safetensors.index.json`).
        what: str. Where `name` was read (that file, or the folder), named in a refusal.

    Returns:
        A str: `name` joined to `folder` (its links not resolved).

    Raises:
        UserError: when `name` is not a non-empty string, is absolute, holds a backslash or a
            `..` part, or names a file (its links followed) outside the folder.
    """
    if (
        not isinstance(name, str)
        or name in ("", ".")
        or os.path.isabs(name)
        or "\\" in name
        or "\x00" in name
    ):
        raise UserError(f"{what}: {shown(name)} is not a file name in {folder}")
    if ".." in name.split("/"):
        raise UserError(f"{what}: {name!r} leaves the folder {folder}")
    path = os.path.join(folder, name)
    real, roots = os.path.realpath(path), [os.path.realpath(folder)]
    snapshots = os.path.dirname(roots[0])
    if os.path.basename(snapshots) == "snapshots":
        roots.append(os.path.join(os.path.dirname(snapshots), "blobs"))
    if not any(real.startswith(root + os.sep) for root in roots):
        raise UserError(f"{what}: {name!r} is a link to {real}, outside the folder {folder}")
    return path


def _finite(value):
    """Whether the JSON number `value` is finite as a float (an int of 400 digits is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def read_token_lines(path, limit=MAX_VOCABULARY_BYTES):
    """The tokens of a vocabulary file of one token a line (`vocab.txt`), each once.

    Lines end at a line feed only (a carriage return stays in its token); the empty line after
    the last line feed is not a token.

    Args:
        path: str. The vocabulary file.
        limit: int. The most bytes read; a larger file is refused. Defaults to
            `MAX_VOCABULARY_BYTES` (64 MiB).

    Returns:
        A list of str: the tokens, in the file's order (the token on line `i + 1` is id `i`).

    Raises:
        UserError: when `path` cannot be read as UTF-8 text (see `read_text`), or holds a token
            twice (naming both lines).
    """
    tokens = read_text(path, limit).split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return _unique(tokens, path)


def _unique(tokens, path):
    seen = {}
    for line, token in enumerate(tokens, 1):
        if token in seen:
            raise UserError(
                f"{path}:{line}: the token {token!r} again (first on line {seen[token]})"
            )
        seen[token] = line
    return tokens


def read_token_ids(path, size, limit=MAX_VOCABULARY_BYTES):
    """The tokens of a `{token: id}` JSON vocabulary (`vocab.json`) by id: ids 0 to `size` - 1,
    each once.

    Args:
        path: str. The vocabulary file.
        size: int. The rows of the token table: the number of tokens it must hold.
        limit: int. The most bytes read; a larger file is refused. Defaults to
            `MAX_VOCABULARY_BYTES` (64 MiB).

    Returns:
        A list of `size` str: the token of each id.

    Raises:
        UserError: when `path` cannot be read as JSON (see `read_json`), is not an object, does
            not hold `size` tokens, or gives a token an id that is not a whole number below
            `size` or that another token has.
    """
    mapping = read_json(path, limit)
    if not isinstance(mapping, dict):
        raise UserError(f"{path}: not a JSON object of tokens and their ids")
    if len(mapping) != size:
        raise UserError(f"{path}: {len(mapping)} tokens, where the token table has {size} rows")
    by_id = [None] * size
    for token, i in mapping.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < size:
            raise UserError(f"{path}: {token!r} has id {i!r}, not a whole number below {size}")
        if by_id[i] is not None:
            raise UserError(f"{path}: id {i} for both {by_id[i]!r} and {token!r}")
        by_id[i] = token
    return by_id
