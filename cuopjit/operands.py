"""Foreign GPU arrays as the operands of one call: cached, owner-less views.

`Operator.forward` takes torch, CuPy and JAX arrays as well as Tensors. `operands(args, kwargs)` swaps
each usable foreign array for a Tensor view cached under its interop key (pointer, shape, dtype token,
device: cuopjit/interop.py), so a warm swap of a torch tensor is five C attribute reads, a tuple and
one dict probe: no Tensor is made and none is freed. The views own nothing and are valid while the
caller's arrays live, which is the length of the call; the operator's plan memo keys on their plan
keys as it does on any Tensor's. Arrays that cannot be operands as they are (host memory, another
dtype, strides) are left in place for the operator's checks, which name them in one line.

The warm path skips even that: `call_key(args, kwargs)` (the reads alone, as one tuple) keys the
operator's `foreign_plans`, which hold the runner, pointers and result position of the first such call,
so a repeated forward on torch tensors is the reads and one probe (cuopjit/ops/base.py).
"""
from __future__ import annotations

from typing import Any

from . import interop
from .layout import CONTIGUOUS
from .tensor import Tensor

_VIEWS: dict[tuple, Tensor] = {}     # interop key -> an owner-less view
_VIEWS_KEPT = 1 << 12                # past this many the table starts over (a view is cheap to remake)
_UNSEEN = object()
_reader = interop.READERS.get       # type -> key reader (None: no foreign array); a miss resolves the type
_torch_key = interop.torch_key      # torch's reader, recognised by identity on the warm path


def view_at(ptr: int, shape: tuple, dtype: Any, device: int, layout: str = CONTIGUOUS) -> Tensor | None:
    """The cached view of memory another object owns (made on first sight); None for host memory
    (device < 0) or a dtype cuopjit does not hold. `dtype`: any interop dtype token (torch.float32, a numpy
    dtype, ...); `layout`: cuopjit/layout.py (an interop key's fifth entry)."""
    key = (ptr, shape, dtype, device) if layout == CONTIGUOUS else (ptr, shape, dtype, device, layout)
    view = _VIEWS.get(key)
    if view is None:
        dt = interop.np_dtype(dtype)
        if dt is None or device < 0:
            return None
        if len(_VIEWS) >= _VIEWS_KEPT:
            _VIEWS.clear()
        view = _VIEWS[key] = Tensor._view(ptr, tuple(shape), dt, device, None, layout)
    return view


def swap(a: Any) -> Tensor | None:
    """`a`'s cached view if it is a foreign GPU array that can be an operand as it is, else None."""
    read = _reader(type(a), _UNSEEN)
    if read is _UNSEEN:
        read = interop.reader(type(a))
    if read is None:
        return None
    key = read(a)
    if key is None:
        return None
    view = _VIEWS.get(key)
    return view if view is not None else view_at(*key)


def operands(args: tuple, kwargs: dict) -> tuple[tuple, dict, dict] | None:
    """(args, kwargs, back) with every usable foreign GPU array swapped for its view, and `back` mapping
    id(view) -> the caller's array (so a forward returns what it was given); None when nothing was swapped.

    The loop over positional operands is written out: it runs on every forward of foreign arrays."""
    back = swapped = None
    views = _VIEWS
    for i, a in enumerate(args):
        read = _reader(type(a), _UNSEEN)
        if read is None:
            continue
        if read is _UNSEEN and (read := interop.reader(type(a))) is None:
            continue
        key = read(a)
        if key is None:
            continue
        view = views.get(key)
        if view is None and (view := view_at(*key)) is None:
            continue
        if back is None:
            back, swapped = {}, list(args)
        swapped[i] = view
        back[id(view)] = a
    if kwargs:
        new = {name: swap(a) for name, a in kwargs.items()}
        if any(v is not None for v in new.values()):
            back = {} if back is None else back
            back.update((id(v), kwargs[name]) for name, v in new.items() if v is not None)
            kwargs = {name: kwargs[name] if v is None else v for name, v in new.items()}
    if back is None:
        return None
    return (args if swapped is None else tuple(swapped)), kwargs, back


def returned(result: Any, back: dict) -> Any:
    """A forward's result (an output, or a tuple of them) with each swapped view mapped back to the caller's array."""
    if type(result) is tuple:
        return tuple(back.get(id(r), r) for r in result)
    return back.get(id(result), result)


# --- the warm path: a call's operands as one key -----------------------------------------------------------
def call_key(args: tuple, kwargs: dict) -> tuple | None:
    """The operands of a call as one hashable key: a foreign array by its interop key, a Tensor by (pointer,
    plan key), anything else as itself (unhashable: the probe raises TypeError). None when an array
    cannot be taken as it is or its type was never seen. Everything a bind reads from its arguments is in it,
    so an operator memoises (runner, pointers, result) of calls on foreign arrays under it.

    A contiguous torch tensor's reads are written out here (no call of interop's reader): this runs on every
    forward of torch tensors."""
    parts = []
    for a in args:
        read = _reader(type(a), _UNSEEN)
        if read is _torch_key and a.is_contiguous():
            parts.append((a.data_ptr(), a.shape, a.dtype, a.get_device()))
        elif read is None:
            parts.append((a.ptr, a.plan_key) if isinstance(a, Tensor) else a)
        elif read is _UNSEEN or (key := read(a)) is None:
            return None
        else:
            parts.append(key)
    if kwargs:
        for name, a in kwargs.items():
            read = _reader(type(a), _UNSEEN)
            if read is None:
                parts.append((name, (a.ptr, a.plan_key) if isinstance(a, Tensor) else a))
            elif read is _UNSEEN or (key := read(a)) is None:
                return None
            else:
                parts.append((name, key))
    return tuple(parts)


def recipe_of(result: Any, args: tuple, kwargs: dict) -> Any:
    """Where `result` sits among a call's operands: an index into args, a keyword's name, or a tuple of those
    (for several outputs); None when it is not one of them."""
    if type(result) is tuple:
        parts = tuple(recipe_of(r, args, kwargs) for r in result)
        return None if None in parts else parts
    found = next((i for i, a in enumerate(args) if a is result), None)
    return found if found is not None else next((n for n, a in kwargs.items() if a is result), None)


def resolve(recipe: Any, args: tuple, kwargs: dict) -> Any:
    """The operand(s) a recipe names in this call's arguments."""
    if type(recipe) is int:
        return args[recipe]
    if type(recipe) is str:
        return kwargs[recipe]
    return tuple(resolve(r, args, kwargs) for r in recipe)
