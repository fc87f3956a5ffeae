"""Image files in and out: the one reader (checked before decoding) and the writer.

Used by the CLI, the bench, validate and convert. The reader checks permissions and the header's
size against a pixel limit before anything is decoded, with one clear error. OpenCV (the `vision`
extra) is imported on use; reading a header needs none."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import UsageError
from .._files import check_output, require_file, require_readable

MAX_IMAGE_PIXELS = 1 << 27
"""134 million pixels (e.g. 16384 x 8192): 400 MB once decoded as BGR, and 30x a 4K frame. Checked
from the header, so a tiny file claiming 65535 x 65535 is refused before OpenCV allocates 12 GB
(OpenCV's own limit, 2^30, would end in a raw ``cv2.error``)."""

FORMATS = "JPEG, PNG, BMP, WebP, TIFF or PNM"
"""What the reader accepts: the formats whose header it reads to check the size before decoding."""


@dataclass(frozen=True)
class ImageHeader:
    """What an image file's header says: its format and size in pixels."""

    format: str
    width: int
    height: int


def opencv() -> Any:
    """The `cv2` module, or a `UsageError` saying which extra installs it."""
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise UsageError(
            "OpenCV is needed to read, resize and draw images and is not installed",
            "pip install 'rknnlaunch[vision]'  (opencv-python-headless)",
        ) from exc
    return cv2


def image_header(data: bytes) -> ImageHeader | None:
    """The format and size the first bytes of an image file declare; None when they are not the
    header of a format we read (or it is cut short). Pure: no decoding, no OpenCV."""
    try:
        return _header(data)
    except (struct.error, IndexError, ValueError):
        return None


def _header(data: bytes) -> ImageHeader | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return ImageHeader("PNG", width, height)
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data.startswith(b"BM") and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return ImageHeader("BMP", abs(width), abs(height))
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return _webp(data)
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff(data)
    if len(data) > 2 and data[0:1] == b"P" and data[1:2] in b"123456" and data[2:3].isspace():
        return _pnm(data)
    return None


def _jpeg(data: bytes) -> ImageHeader | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return ImageHeader("JPEG", width, height)
        if marker == 0xDA or length < 2:  # scan data before any frame header
            return None
        at += 2 + length
    return None


def _webp(data: bytes) -> ImageHeader | None:
    chunk = data[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return ImageHeader("WebP", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L":
        b0, b1, b2, b3 = data[21:25]
        width = 1 + (b0 | (b1 & 0x3F) << 8)
        height = 1 + (b1 >> 6 | b2 << 2 | (b3 & 0x0F) << 10)
        return ImageHeader("WebP", width, height)
    if chunk == b"VP8X":
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return ImageHeader("WebP", width, height)
    return None


def _tiff(data: bytes) -> ImageHeader | None:
    order = "<" if data[:2] == b"II" else ">"
    (offset,) = struct.unpack(order + "I", data[4:8])
    (count,) = struct.unpack(order + "H", data[offset : offset + 2])
    size: dict[int, int] = {}
    for index in range(count):
        entry = data[offset + 2 + 12 * index : offset + 14 + 12 * index]
        tag, kind = struct.unpack(order + "HH", entry[:4])
        if tag in (256, 257):
            size[tag] = struct.unpack(
                order + ("H" if kind == 3 else "I"), entry[8 : 10 if kind == 3 else 12]
            )[0]
    if 256 in size and 257 in size:
        return ImageHeader("TIFF", size[256], size[257])
    return None


def _pnm(data: bytes) -> ImageHeader | None:
    words: list[int] = []
    for line in data[2:4096].split(b"\n"):
        for word in line.split(b"#", 1)[0].split():
            words.append(int(word))
            if len(words) == 2:
                return ImageHeader("PNM", words[0], words[1])
    return None


def _load(path: str | Path, what: str) -> tuple[bytes, ImageHeader]:
    """The file's bytes and header, every check done: a regular file, readable, an image format we
    read, and within the pixel limit."""
    fix = f"pass a {FORMATS} image file"
    require_file(path, what, fix, UsageError)
    require_readable(path, what, UsageError)
    data = Path(path).read_bytes()
    header = image_header(data)
    if header is None:
        start = data[:16]
        looks = "it is empty" if not data else f"it starts with {start!r}"
        raise UsageError(f"{what} {path} is not a {FORMATS} image ({looks})", fix)
    pixels = header.width * header.height
    if pixels == 0 or pixels > MAX_IMAGE_PIXELS:
        why = "no pixels" if pixels == 0 else f"more than the {MAX_IMAGE_PIXELS:,} pixels rknnlaunch decodes"
        raise UsageError(
            f"{what} {path}: its {header.format} header claims {header.width}x{header.height} pixels ({why})",
            "pass the real image (a truncated or forged header?), or resize it below 16384x8192",
        )
    return data, header


def check_image(path: str | Path, what: str = "image file") -> ImageHeader:
    """Every check `read_image` makes before decoding (cheap: no OpenCV): for image sets checked
    before long work (validate, convert)."""
    return _load(path, what)[1]


def read_image(path: str | Path, what: str = "image file") -> npt.NDArray[np.uint8]:
    """Decode the image file at ``path`` as BGR uint8 (H x W x 3); `UsageError` (exit 2) for a missing,
    unreadable, non-image, oversized or undecodable file, never an OpenCV exception. ``what`` names
    the input in the message (``--image``, ``image file``)."""
    data, header = _load(path, what)
    cv2 = opencv()
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise UsageError(
            f"cannot decode {what} {path} ({header.format}): {reason}", "pass an intact image"
        ) from None
    if image is None:
        raise UsageError(
            f"cannot decode {what} {path}: its {header.format} header is there but the data is not "
            "(truncated or corrupt)",
            f"pass an intact {FORMATS} file",
        )
    return np.asarray(image, np.uint8)


def check_image_writable(path: str, flag: str = "--out") -> None:
    """Fail before any work when ``path`` cannot be written as an image (the output rule of
    `rknnlaunch._files.check_output`, with OpenCV's writers as the extensions)."""
    check_output(path, flag, writer_has=opencv().haveImageWriter, example="annotated.jpg")


def write_image(path: str, image: npt.NDArray[np.uint8]) -> None:
    """Encode ``image`` (BGR) to ``path``; the extension picks the format."""
    cv2 = opencv()
    try:
        written = bool(cv2.imwrite(path, image))
    except cv2.error as exc:
        raise UsageError(f"cannot write {path}: {exc}", "use a .jpg or .png name") from None
    if not written:
        raise UsageError(f"cannot write {path}", "use a .jpg or .png path in a writable folder")
