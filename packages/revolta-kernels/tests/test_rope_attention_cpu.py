"""revolta::rotary_cache_and_attention on the CPU: the two ops it stands for, through both entry points."""

from __future__ import annotations

import torch
from kernels_cases import cos_sin_table, make_attn_case, newest_slots

from revolta_kernels import ops, reference


def _problem(seed: int = 0):
    case = make_attn_case([5, 40, 17], [1, 1, 1], 8, 2, 64, 16, torch.float16, q_dtype=torch.float32, seed=seed)
    case.key_cache, case.value_cache = case.key_cache.float(), case.value_cache.float()
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(3, (8 + 4) * 64, generator=g)
    q, k, v = qkv[:, :512].view(3, 8, 64), qkv[:, 512:640].view(3, 2, 64), qkv[:, 640:].view(3, 2, 64)
    return case, q, k, v, case.context_lens.long() - 1, newest_slots(case), cos_sin_table(64, 64)


def test_matches_rotary_and_cache_then_attention():
    case, q, k, v, positions, slots, cos_sin = _problem()
    kc, vc = case.key_cache.clone(), case.value_cache.clone()
    q_rot = reference.rotary_and_cache(positions, q, k, v, cos_sin, True, kc, vc, slots, None, None)
    want = reference.paged_attention(q_rot, kc, vc, case.block_tables, case.context_lens, case.query_start_loc,
                                     case.scale)
    args = (positions, q, k, v, cos_sin, True)
    rest = (slots, case.block_tables, case.context_lens, case.query_start_loc, 1, case.scale)
    got = ops.rotary_cache_and_attention(*args, case.key_cache, case.value_cache, *rest)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(case.key_cache, kc, rtol=0, atol=0)
    kc2, vc2 = kc.clone(), vc.clone()
    again = torch.ops.revolta.rotary_cache_and_attention(*args, kc2, vc2, *rest, None, None)  # the dispatcher path
    torch.testing.assert_close(again, want, rtol=1e-5, atol=1e-5)


def test_passes_torch_opcheck():
    case, q, k, v, positions, slots, cos_sin = _problem(1)
    torch.library.opcheck(ops._rotary_cache_and_attention, (
        positions, q, k, v, cos_sin, True, case.key_cache, case.value_cache, slots, case.block_tables,
        case.context_lens, case.query_start_loc, 1, case.scale, None, None))
