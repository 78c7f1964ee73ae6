"""Saving and loading compiled models: one self-describing file.

Layout: the magic bytes ``POPTORCH-SIM``, a little-endian uint32 format
version, a uint64 payload length, the payload (``torch.save`` of a dict) and
a CRC32 of the payload. A truncated, corrupted or foreign file, or one
written by an incompatible format version, raises :class:`Error` with the
reason before anything is unpickled.

The payload holds the PopTorch version, the full-batch inputs the model was
compiled with, the options and, when the model is exported, the model, its
optimizer and the optimizer state (pickled together so that the optimizer
keeps referring to the model's parameters), plus the device RNG state.
"""
import io
import os
import struct
import zlib
from typing import Any, Dict

import torch

from ..files import atomic_write
from .._logging import logger
from .._version import __version__
from ..errors import createPoptorchError
from .saved_class import fingerprint
from .state import ExecutorState

MAGIC = b"POPTORCH-SIM"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<IQ")


def _resolve_path(filename: str) -> str:
    if os.path.isdir(filename):
        path = os.path.join(filename, "model.poptorch")
        logger.warning("%s is a directory: saving the model to %s", filename,
                       path)
        return path
    parent = os.path.dirname(os.path.abspath(filename))
    os.makedirs(parent, exist_ok=True)
    return filename


def save_executor(state: ExecutorState, filename: str, export_model: bool,
                  save_rng_state: bool) -> None:
    """Writes ``state``'s compiled model to ``filename``."""
    program = state.require_program()
    data: Dict[str, Any] = {
        "version": __version__,
        "executable_inputs": program.saved_inputs,
        "options": state.options,
        "model_class": fingerprint(state.user_model),
    }
    if export_model:
        if state.training:
            state.copy_weights_to_host_if_needed()
        optimizer = state.optimizer_link.optimizer \
            if state.optimizer_link is not None else None
        data.update(training=state.training, model=state.user_model,
                    optimizer=optimizer,
                    optimizer_state=optimizer.state_dict()
                    if optimizer is not None else None)
    if save_rng_state:
        data["rng_state"] = program.rng.get_state()
    buffer = io.BytesIO()
    torch.save(data, buffer, pickle_protocol=4)
    payload = buffer.getvalue()
    path = _resolve_path(filename)
    # A failed overwrite (full disk, Ctrl-C) keeps the previous checkpoint.
    with atomic_write(path, "wb") as f:
        f.write(MAGIC)
        f.write(_HEADER.pack(FORMAT_VERSION, len(payload)))
        f.write(payload)
        f.write(struct.pack("<I", zlib.crc32(payload)))


def read_metadata(filename: str) -> Dict[str, Any]:
    """The payload of a saved model, validated."""
    def invalid(reason: str) -> Exception:
        return createPoptorchError(f"Invalid file {filename}: {reason}")

    try:
        with open(filename, "rb") as f:
            blob = f.read()
    except OSError as error:
        raise invalid(f"it cannot be read ({error.strerror})") from error
    if not blob.startswith(MAGIC):
        raise invalid("it is not a model saved by PopTorch "
                      "(PoplarExecutor.save or compileAndExport)")
    offset = len(MAGIC)
    if len(blob) < offset + _HEADER.size:
        raise invalid("the file is truncated")
    version, length = _HEADER.unpack_from(blob, offset)
    if version != FORMAT_VERSION:
        raise invalid(f"it uses file format {version} but this PopTorch reads "
                      f"format {FORMAT_VERSION}; save the model again with "
                      "this version")
    offset += _HEADER.size
    if len(blob) != offset + length + 4:
        raise invalid(f"the file is truncated or has trailing data "
                      f"({len(blob)} bytes, expected {offset + length + 4})")
    payload = blob[offset:offset + length]
    (crc,) = struct.unpack_from("<I", blob, offset + length)
    if zlib.crc32(payload) != crc:
        raise invalid("the file is corrupted (checksum mismatch)")
    try:
        data = torch.load(io.BytesIO(payload), weights_only=False)
    except (AttributeError, ImportError) as error:
        raise invalid(
            f"its content cannot be loaded ({error}): the saved model's "
            "class cannot be found. Import or define it, under the same "
            "module and name, before loading the file.") from None
    except Exception as error:  # noqa: BLE001 (any unpickling failure)
        raise invalid(f"its content cannot be loaded ({error})") from error
    if data.get("version") != __version__:
        raise createPoptorchError(
            f"Invalid file {filename}: PopTorch version mismatch: File was "
            f"created with version: {data.get('version')} and this is "
            f"version {__version__}")
    return data
