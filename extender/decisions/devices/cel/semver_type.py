"""Kubernetes' CEL Semver type (k8s.io/apiserver/pkg/cel/library/semverlib.go), re-implemented.

Parsing follows github.com/blang/semver/v4 Parse (strict semver 2.0.0; no leading zeros, no "v" prefix)
and semver(text, true) its tolerant normalisation. In the CEL runtime a version is `bytes`: SEMVER_TAG
followed by "major.minor.patch[-prerelease]". Build metadata is dropped because it has no precedence:
upstream equality is Compare() == 0, so `semver('1.0.0+a') == semver('1.0.0+b')` is true, and with this
canonical encoding CEL's own `==` on the bytes gives exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TypeGuard

SEMVER_TAG = b"\xffV"
SEMVER_TYPE_NAME = "kubernetes.Semver"
_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_MAX_UINT64 = 2**64 - 1


class SemverParseError(ValueError):
    """Text that blang/semver refuses; the message follows upstream's."""


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()  # numeric identifiers as int, others as str

    def canonical(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            core += "-" + ".".join(str(part) for part in self.pre)
        return core

    def compare(self, other: Version) -> int:
        mine = (self.major, self.minor, self.patch)
        theirs = (other.major, other.minor, other.patch)
        if mine != theirs:
            return 1 if mine > theirs else -1
        if not self.pre or not other.pre:
            return (not self.pre) - (not other.pre)  # a release sorts after its pre-releases
        for a, b in zip(self.pre, other.pre, strict=False):
            if a == b:
                continue
            if isinstance(a, int) != isinstance(b, int):
                return -1 if isinstance(a, int) else 1  # numeric identifiers sort first
            return 1 if a > b else -1  # type: ignore[operator]  # identifiers of one kind (both int or both str)
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))


def _number(text: str, what: str) -> int:
    if not set(text) <= _NUMBERS:
        raise SemverParseError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverParseError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    if not text or int(text) > _MAX_UINT64:
        raise SemverParseError(f"invalid {what} number {text!r}")
    return int(text)


@lru_cache(maxsize=4096)
def parse(text: str) -> Version:
    """blang/semver/v4 Parse."""
    if not text:
        raise SemverParseError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverParseError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    patch_text = parts[2]
    build: list[str] = []
    prerelease: list[str] = []
    if "+" in patch_text:
        patch_text, build_text = patch_text.split("+", 1)
        build = build_text.split(".")
    if "-" in patch_text:
        patch_text, pre_text = patch_text.split("-", 1)
        prerelease = pre_text.split(".")
    patch = _number(patch_text, "patch")
    pre: list[int | str] = []
    for item in prerelease:
        if not item:
            raise SemverParseError("Prerelease is empty")
        if set(item) <= _NUMBERS:
            if len(item) > 1 and item[0] == "0":
                raise SemverParseError(f"Numeric PreRelease version must not contain leading zeroes {item!r}")
            if int(item) > _MAX_UINT64:
                raise SemverParseError(f"invalid prerelease number {item!r}")
            pre.append(int(item))
        elif set(item) <= _ALPHANUM:
            pre.append(item)
        else:
            raise SemverParseError(f"Invalid character(s) found in prerelease {item!r}")
    for item in build:
        if not item:
            raise SemverParseError("Build meta data is empty")
        if not set(item) <= _ALPHANUM:
            raise SemverParseError(f"Invalid character(s) found in build meta data {item!r}")
    return Version(major, minor, patch, tuple(pre))


def parse_normalized(text: str) -> Version:
    """semverlib's normalizeAndParse: drop a "v" prefix and leading zeros, fill a missing minor/patch."""
    if text.startswith("v"):
        text = text[1:]
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _NUMBERS:
                part = "0" + part
            parts[index] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise SemverParseError("short version cannot contain PreRelease/Build meta data")
        parts.extend(["0"] * (3 - len(parts)))
    return parse(".".join(parts))


def encode(version: Version) -> bytes:
    return SEMVER_TAG + version.canonical().encode()


def encode_attribute(text: str) -> bytes:
    """A version attribute as CEL sees it (the API server validated it already)."""
    return encode(parse(text))


def is_semver(raw: object) -> TypeGuard[bytes | bytearray]:
    return isinstance(raw, (bytes, bytearray)) and raw[:2] == SEMVER_TAG


@lru_cache(maxsize=8192)
def _decode(raw: bytes) -> Version:
    return parse(raw[2:].decode())


def decode(raw: object) -> Version:
    if not is_semver(raw):
        raise TypeError("no such overload")
    return _decode(bytes(raw))


# --- the CEL functions ----------------------------------------------------------------------------------


def cel_semver(text: str, normalize: bool = False) -> bytes:
    return encode(parse_normalized(text) if normalize else parse(text))


def cel_is_semver(text: str, normalize: bool = False) -> bool:
    try:
        if normalize:
            parse_normalized(text)
        else:
            parse(text)
    except SemverParseError:
        return False
    return True


def compare(left: bytearray, right: bytearray) -> int:
    return decode(left).compare(decode(right))


def _int64(value: int) -> int:
    """Upstream returns types.Int(uint64): values beyond int64 wrap around."""
    return value - 2**64 if value >= 2**63 else value


def cel_major(raw: bytearray) -> int:
    return _int64(decode(raw).major)


def cel_minor(raw: bytearray) -> int:
    return _int64(decode(raw).minor)


def cel_patch(raw: bytearray) -> int:
    return _int64(decode(raw).patch)
