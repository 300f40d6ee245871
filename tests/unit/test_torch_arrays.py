"""from_torch: the fallback's tensors (files only torch reads) as numpy arrays, bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from tests.unit.torch_samples import DTYPES, random_bits
from tui_acc.dumps.torchfile.arrays import from_torch

GEN = torch.Generator().manual_seed(17)


def _random_bits(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return random_bits(dtype, *shape, generator=GEN)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_every_dtype_bit_for_bit(dtype: torch.dtype) -> None:
    for tensor in (
        _random_bits(dtype, 3, 4),
        _random_bits(dtype, 4, 6)[1:, ::2].t(),
        _random_bits(dtype, 1)[0],
    ):
        array = from_torch(tensor)
        assert str(array.dtype) == str(dtype).removeprefix("torch.")
        assert array.shape == tuple(tensor.shape)
        expected = tensor.reshape(-1).contiguous().view(torch.uint8).numpy()
        assert np.array_equal(np.ascontiguousarray(array).reshape(-1).view(np.uint8), expected)


def test_complex32_widened_exactly_and_lazy_views_resolved() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "ComplexHalf support is experimental"
        parts = torch.randn(2, 5, generator=GEN), torch.randn(2, 5, generator=GEN)
        half = torch.complex(*parts).to(torch.complex32)
        array = from_torch(half)
        expected = half.to(torch.complex64)
    assert array.dtype == np.complex64
    assert np.array_equal(array.view(np.uint32), expected.numpy().view(np.uint32))
    values = torch.complex(*parts)
    assert np.array_equal(from_torch(values.conj()), values.conj().resolve_conj().numpy())
    parameter = torch.nn.Parameter(torch.randn(3, generator=GEN))  # requires grad: detached
    assert np.array_equal(from_torch(parameter), parameter.detach().numpy())


def test_what_numpy_cannot_hold_is_refused_by_name() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: quantized deprecated, CSR in beta
        quantized = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
        csr = torch.ones(2, 2).to_sparse_csr()
    refused = {
        "sparse": torch.ones(2, 2).to_sparse(),
        "sparse_csr": csr,
        "quantized": quantized,
        "float4_e2m1fn_x2": torch.empty(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2),
        "meta": torch.empty(2, device="meta"),
    }
    for name, tensor in refused.items():
        with pytest.raises(ValueError, match=name):
            from_torch(tensor)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.int64, torch.bool]
)
def test_to_torch_is_from_torch_reversed(dtype: torch.dtype) -> None:
    from tui_acc.dumps.torchfile.arrays import to_torch

    tensor = (torch.randn(3, 4, generator=torch.Generator().manual_seed(2)) * 3).to(dtype)
    back = to_torch(from_torch(tensor))
    assert back.dtype == dtype and back.shape == tensor.shape
    assert torch.equal(
        back.view(torch.uint8) if dtype.itemsize == 1 else back,
        tensor.view(torch.uint8) if dtype.itemsize == 1 else tensor,
    )
