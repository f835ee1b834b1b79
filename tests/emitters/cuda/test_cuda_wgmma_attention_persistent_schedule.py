"""The persistent Hopper attention kernel's schedule fields without a GPU: ``persistent`` and ``q_buffers`` in
JSON and validation (each error names its field, a second Q buffer must fit), the persistent forms in the
search space after the others, and the grid (the fewer of the items and the target's SMs). The walk it runs:
test_cuda_wgmma_attention_persistent_walk.py; NVRTC: test_cuda_wgmma_attention_persistent_nvrtc.py; GPU runs:
test_cuda_wgmma_attention_gpu.py."""

from __future__ import annotations

import dataclasses

import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda.hopper import attention as A
from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule, hero_schedule, search_space
from tracea.kernels import Attention

PP = AttnWgmmaSchedule(stages=2, persistent=True)


def test_json_omits_persistent_when_false_and_round_trips():
    hero = hero_schedule(Attention(1, 2, 100, 128, dtype="bf16"))
    assert "persistent" not in hero.to_json() and AttnWgmmaSchedule.from_json(hero.to_json()) == hero
    p = dataclasses.replace(hero, persistent=True)
    assert p.to_json()["persistent"] is True and AttnWgmmaSchedule.from_json(p.to_json()) == p
    assert p.name == hero.name + "_pe" and p.smem_bytes(128) == hero.smem_bytes(128) + 8
    assert "q_buffers" not in p.to_json()
    q2 = dataclasses.replace(p, stages=2, q_buffers=2)
    assert q2.to_json()["q_buffers"] == 2 and AttnWgmmaSchedule.from_json(q2.to_json()) == q2
    assert q2.name.endswith("_pe_q2") and q2.smem_bytes(64) == dataclasses.replace(p, stages=2).smem_bytes(64) + 128 * 128 + 16


@pytest.mark.parametrize("value", [1, "yes", None])
def test_validation_names_the_field(value):
    with pytest.raises(BadInputError, match="persistent"):
        AttnWgmmaSchedule(persistent=value).validate()
    with pytest.raises(BadInputError, match="persistent"):
        AttnWgmmaSchedule.from_json({**AttnWgmmaSchedule().to_json(), "persistent": value}).validate()


@pytest.mark.parametrize("fields", [dict(q_buffers=2), dict(q_buffers=3, persistent=True),
                                    dict(q_buffers=0, persistent=True), dict(q_buffers=True, persistent=True)])
def test_q_buffers_validation_names_the_field(fields):
    with pytest.raises(BadInputError, match="q_buffers"):
        AttnWgmmaSchedule(**fields).validate()


def test_a_second_q_buffer_must_fit():
    with pytest.raises(BadInputError, match="stages"):  # 2 Q and 2 K/V stages of 64 keys at head dim 256
        AttnWgmmaSchedule(bk=64, persistent=True, q_buffers=2).validate(Attention(1, 2, 100, 256, dtype="bf16"))
    AttnWgmmaSchedule(stages=2, persistent=True, q_buffers=2).validate(Attention(1, 2, 100, 128, dtype="bf16"))


def test_search_space_adds_persistent_forms_after_the_others():
    for d in (64, 128, 256):
        op = Attention(16, 32, 512, d, dtype="bf16")
        space = search_space(op)
        two = [s for s in space if s.ctas == 2]  # two blocks an SM: the last entries, each a form before it
        assert space[len(space) - len(two):] == two and all(dataclasses.replace(s, ctas=1) in space for s in two)
        assert bool(two) == (d < 256)  # at 256 no form fits half an SM
        space = space[: len(space) - len(two)]
        split = [s for s in space if s.split_kv]  # K and V released apart: the entries before those
        assert space[len(space) - len(split):] == split and not any(s.persistent or s.intra for s in split)
        space = space[: len(space) - len(split)]
        per = [s for s in space if s.persistent]
        assert per and len(set(space)) == len(space) and not any(s.persistent for s in space[:-len(per)])
        assert all(s.consumers == 2 and dataclasses.replace(s, persistent=False, q_buffers=1) in space for s in per)
        assert any(not s.pingpong for s in per) and any(s.pingpong for s in per)
        assert any(s.q_buffers == 2 for s in per) == (d < 256)
        for s in per:
            s.validate(op)
    short = Attention(16, 32, 512, 64, dtype="bf16")  # the hero walks short items persistently
    assert hero_schedule(short).persistent and hero_schedule(short) in search_space(short)
    assert not hero_schedule(Attention(16, 32, 512, 128, dtype="bf16")).persistent


def test_grid_is_min_of_items_and_sms():
    op = Attention(16, 32, 512, 64, dtype="bf16")  # 4 q tiles x 512 = 2048 items
    r, _ = A.render(op, dataclasses.replace(PP, stages=4))
    assert r.grid == (132, 1, 1) and r.metadata["launch"]["grid"] == [132, 1, 1]
    assert r.metadata["tile"]["persistent"] is True
    assert A.grid_blocks(op, PP, 114) == 114 and A.grid_blocks(op, AttnWgmmaSchedule(), 114) == 2048
    small = Attention(1, 2, 17, 64, dtype="bf16")
    assert A.grid_blocks(small, PP, 132) == 2


def test_render_sizes_the_grid_from_the_targets_sm_count():
    from tracea.emitters.cuda.arch import parse_arch

    op = Attention(16, 32, 512, 64, dtype="bf16")
    arch = parse_arch("sm_90a")
    assert A.render(op, PP, arch)[0].grid[0] == min(2048, arch.sm_count)
    assert A.render(op, PP, dataclasses.replace(arch, sm_count=114))[0].grid[0] == 114
    assert A.render(op, AttnWgmmaSchedule(), dataclasses.replace(arch, sm_count=114))[0].grid[0] == 2048
