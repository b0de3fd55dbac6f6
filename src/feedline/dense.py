"""Whether a torch tensor has plain dense bytes (a leaf module: imports neither torch nor
the rest of feedline; it reads the tensor's own attributes).

Shared by the two places that take tensors they did not make: a checkpoint save refuses to
store a tensor without them (:mod:`feedline.checkpoint`), and a ``.pt`` field refuses to
batch one (:func:`feedline.decode.codecs.decode_torch`).
"""

from __future__ import annotations

from typing import Any


def why_not_dense(t: Any) -> str:
    """Why torch tensor ``t`` has no plain strided bytes ("" when it has): nested, quantized,
    sparse or another layout, or on the meta device."""
    if getattr(t, "is_nested", False):
        return "a nested tensor"
    if getattr(t, "is_quantized", False):
        return f"quantized ({str(t.dtype).removeprefix('torch.')})"
    layout = str(getattr(t, "layout", "torch.strided"))
    if layout != "torch.strided":
        return f"a {layout.removeprefix('torch.')} tensor"
    if t.device.type == "meta":
        return "on the meta device (it has no data)"
    return ""
