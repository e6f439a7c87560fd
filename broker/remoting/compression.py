"""Message bodies compressed by Apache's producers, inflated on the way in.

Apache's Java producer compresses a single message's body over ``compressMsgBodyOverHowmuch``
(4 KiB) and flags it in sysFlag: COMPRESSED (0x1) plus the type in bits 8-10 (rocketmq-common
5.3.3 ``MessageSysFlag``/``CompressionType``: LZ4 1, ZSTD 2, ZLIB 3; 0, from 4.x clients, means
ZLIB). Its ``Lz4Compressor`` writes an LZ4 *frame* (lz4-java's LZ4FrameOutputStream), its
``ZstdCompressor`` a zstd stream (zstd-jni's ZstdOutputStream, no content size in the frame
header), its ``ZlibCompressor`` a zlib stream (java.util.zip.Deflater).

RocketScope stores the plain body, so a gRPC consumer (which has no compression flag) and a
remoting consumer read the same bytes; the stored sysFlag carries no compression bits.
"""

from __future__ import annotations

import zlib

import lz4.frame
import zstandard

from .codec import HeaderError, ResponseCode

SYSFLAG_COMPRESSED = 0x1
COMPRESSION_TYPE_MASK = 0x700
LZ4, ZSTD, ZLIB = 1, 2, 3
NAMES = {0: "ZLIB", LZ4: "LZ4", ZSTD: "ZSTD", ZLIB: "ZLIB"}
# zstd input fed per step: a step inflates to at most a few MiB (RLE blocks of 128 KiB in 4 bytes each),
# so a small body that claims gigabytes is stopped just past the limit
ZSTD_STEP = 256


def compression_type(sys_flag: int) -> int:
    return (sys_flag & COMPRESSION_TYPE_MASK) >> 8


def _zlib(body: bytes, limit: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(body, limit + 1)
    if not d.eof and len(out) <= limit:
        raise ValueError("the stream ends early")
    return out


def _lz4(body: bytes, limit: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out: bytes = d.decompress(body, max_length=limit + 1)
    if not d.eof and len(out) <= limit:
        raise ValueError("the frame ends early")
    return out


def _zstd(body: bytes, limit: int) -> bytes:
    d = zstandard.ZstdDecompressor().decompressobj()
    out = bytearray()
    for i in range(0, len(body), ZSTD_STEP):
        out += d.decompress(body[i:i + ZSTD_STEP])
        if len(out) > limit or d.eof:
            break
    if not d.eof and len(out) <= limit:
        raise ValueError("the frame ends early")
    return bytes(out)


DECODERS = {"ZLIB": _zlib, "LZ4": _lz4, "ZSTD": _zstd}


def inflate(body: bytes, sys_flag: int, limit: int) -> bytes:
    """The body as the producer wrote it; MESSAGE_ILLEGAL naming the type when it does not inflate
    or inflates past ``limit`` (maxMessageSize: a small body must not expand without bound)."""
    ctype = compression_type(sys_flag)
    name = NAMES.get(ctype)
    if name is None:
        raise HeaderError(f"sysFlag: compression type {ctype} is unknown (LZ4 1, ZSTD 2, ZLIB 3)",
                          ResponseCode.MESSAGE_ILLEGAL)
    try:
        out = DECODERS[name](body, limit)
    except (zlib.error, RuntimeError, ValueError, zstandard.ZstdError) as exc:
        raise HeaderError(f"body flagged {name}-compressed (sysFlag {sys_flag:#x}) does not inflate: {exc}",
                          ResponseCode.MESSAGE_ILLEGAL) from None
    if len(out) > limit:
        raise HeaderError(f"{name}-compressed body inflates past maxMessageSize {limit}",
                          ResponseCode.MESSAGE_ILLEGAL)
    return out
