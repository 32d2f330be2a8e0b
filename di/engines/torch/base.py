"""What the torch adapter's programs ask of it (:class:`TorchBase`: its selector,
compiler, whether it compiles now, and the conversions of context values), apart
from the operators it assembles (:mod:`.adapter`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.compile import counting_static_values, static_positions
from di.backends.protocol import Adapter, Program
from di.contexts import Context
from di.engines.torch.compile import TorchCompiler
from di.engines.torch.selector import AutoTorch
from di.engines.torch.tensors import float_leaves_to_tensors, python_scalar, scalar_to_tensor
from di.engines.torch.transforms import inside_transform
from di.pytrees import is_pytree, tree_leaves

__all__ = ["TorchBase"]


class TorchBase(Adapter):
    """What the torch adapter's programs ask of it (its selector, compiler and
    argument conversions), apart from the operators it assembles."""

    selector: AutoTorch
    compiler: TorchCompiler

    def compiles_now(self) -> bool:
        """Whether programs prepared now are compiled: on a compiled backend, unless
        the preparation runs inside a ``torch.func`` transform or a ``torch.compile``
        trace (an unprepared call there), where compiled code cannot run; those
        programs run uncompiled, as the transform's own code does."""
        return self.compiled and not inside_transform()

    def torch_context_converters(self, x: Any, contexts: Sequence[Context]) -> list[Callable[[Any], Any]]:
        """Converters of the context values; on compiled backends Python scalars
        that are traced become 0-d tensors (floats in ``x``'s dtype), as do the
        Python float leaves of a list or dict context (only where the prepared
        value had one: nothing is added for array contexts), and static
        NumPy integer and bool scalars Python ints and bools (compiled in as
        constants, as Python ones are, rather than 0-d tensors)."""
        converters = self.input_converters([c.value for c in contexts])
        if self.compiled:
            statics = static_positions(contexts, self.backend)
            sample = tree_leaves(x)[0] if is_pytree(x) else x  # (a pytree's first leaf gives the dtype)
            x_dtype = self.input_converters([sample])[0](
                np.asarray(sample) if isinstance(sample, float) else sample
            ).dtype
            for i, context in enumerate(contexts):
                if i in statics:
                    if isinstance(context.value, (np.integer, np.bool_)):
                        converters[i] = python_scalar
                elif isinstance(context.value, (int, float)):
                    converters[i] = scalar_to_tensor(x_dtype if isinstance(context.value, float) else None)
                elif any(type(leaf) is float for leaf in tree_leaves(context.value)):
                    converters[i] = float_leaves_to_tensors(converters[i], x_dtype)
        return converters

    def counted(self, program: Program, contexts: Sequence[Context], lead: int) -> Program:
        """``program`` (arguments ``x``, then ``lead - 1`` tangent arguments, then the
        context values), counting the static values it meets when compiled: the
        prepared ones from the start (the preparation compiled them), numbered
        among the contexts (tangents come first with ``lead`` 2)."""
        if not self.compiled:
            return program
        statics = static_positions(contexts, self.backend)
        return counting_static_values(
            program,
            tuple(lead - 1 + i for i in statics),
            self.backend,
            prepared=[contexts[i].value for i in statics],
            first_context=lead - 1,
        )
