"""The attention implementation (src/plan/attention.py): chosen from the train env (flash-attn installed ->
flash_attention_2, else sdpa), overridable with model.attn_implementation, shown with its reason in the
plan table, recorded in the snapshot and in verl's config where verl reads it
(actor_rollout_ref.model.override_config.attn_implementation, verl/workers/config/model.py). Against
the real code: verl's HFModelConfig and transformers load the tiny policy with the chosen
implementation (and refuse flash_attention_2 here, the failure the choice avoids), and verl's
remove-padding input (packed sequences, position ids restarting per sequence, no attention mask) gives
with sdpa the same logits as each sequence alone: use_remove_padding stays on."""
from __future__ import annotations

import json

import pytest
import yaml
from rich.console import Console

from src import verl_config
from src.config import compose_config
from src.pipeline import identify
from src.plan import PlanError, build_plan
from src.plan.attention import installed_flash_attn, plan_attention
from src.plan.table import render
from tests.helpers.launches import launch

FLASH = "2.8.3"  # what `make setup PLATFORM=gpu FLASH_ATTN=1` installs (envs/lock/train-gpu-flash-attn.txt: verl's fsdp extra)


@pytest.fixture(scope="module")
def smoke_cfg(tmp_path_factory):
    out = tmp_path_factory.mktemp("attn")
    return compose_config(["experiment=smoke", f"paths.output_dir={out}"])


def test_this_train_env_has_no_flash_attn_so_auto_is_sdpa(smoke_cfg):
    # the CPU locks install no flash-attn; the probe reads package metadata as transformers does
    assert installed_flash_attn() is None
    plan = build_plan(smoke_cfg, run_dir="r")  # probes
    assert plan.attention.implementation == "sdpa" and plan.attention.remove_padding is True
    assert "flash-attn is not installed" in plan.attention.reason
    assert "make setup PLATFORM=gpu FLASH_ATTN=1" in plan.attention.reason


def test_auto_takes_flash_attention_2_when_flash_attn_is_installed(smoke_cfg):
    plan = build_plan(smoke_cfg, run_dir="r", flash_attn=FLASH)
    assert plan.attention.implementation == "flash_attention_2"
    assert f"flash-attn {FLASH} is installed" in plan.attention.reason


@pytest.mark.parametrize("flash", [None, FLASH])
def test_an_explicit_choice_is_kept(flash):
    a = plan_attention({"attn_implementation": "eager"}, {}, flash, dry_run=False)
    assert a.implementation == "eager" and "model.attn_implementation=eager" in a.reason
    assert a.remove_padding is True and "position ids" in a.remove_padding_reason


def test_flash_attention_2_without_flash_attn_is_refused_before_a_real_launch_and_noted_in_a_dry_run():
    with pytest.raises(PlanError) as err:
        plan_attention({"attn_implementation": "flash_attention_2"}, {}, None, dry_run=False)
    assert "not installed" in str(err.value) and "model.attn_implementation=auto" in str(err.value)
    dry = plan_attention({"attn_implementation": "flash_attention_2"}, {}, None, dry_run=True)
    assert dry.implementation == "flash_attention_2" and "a real launch from this env is refused" in dry.reason


def test_ulysses_sequence_parallel_needs_flash_attention():
    key = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
    with pytest.raises(PlanError, match="Ulysses"):
        plan_attention({"attn_implementation": "auto"}, {key: 2}, None, dry_run=True)
    assert plan_attention({"attn_implementation": "auto"}, {key: 2}, FLASH, dry_run=True).implementation \
        == "flash_attention_2"


def test_a_verl_pin_wins_and_is_named():
    a = plan_attention({"attn_implementation": "auto"},
                       {"actor_rollout_ref.model.override_config.attn_implementation": "eager",
                        "actor_rollout_ref.model.use_remove_padding": False}, None, dry_run=True)
    assert (a.implementation, a.remove_padding) == ("eager", False)
    assert a.reason.startswith("pinned by verl.") and a.remove_padding_reason.startswith("pinned by verl.")


def test_an_unknown_implementation_is_refused_at_composition(tmp_path):
    with pytest.raises(Exception) as err:
        compose_config(["experiment=smoke", "model.attn_implementation=flash3", f"paths.output_dir={tmp_path}"])
    assert "attn_implementation" in str(err.value)


@pytest.mark.parametrize("overrides, flash, want", [([], None, "sdpa"), ([], FLASH, "flash_attention_2"),
                                                    (["model.attn_implementation=eager"], FLASH, "eager")])
def test_the_choice_reaches_verls_config_where_verl_reads_it_and_does_not_change_the_run_id(
        overrides, flash, want, tmp_path):
    cfg = compose_config(["experiment=smoke", *overrides, f"paths.output_dir={tmp_path}"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"), flash_attn=flash)
    verl_cfg = verl_config.build(plan, cfg)  # verl's validate_config passes it
    assert verl_cfg.actor_rollout_ref.model.override_config.attn_implementation == want
    assert verl_cfg.actor_rollout_ref.model.use_remove_padding is True
    # the kernel is not part of what is trained: a run relaunched after flash-attn is installed resumes
    _, _, ident = identify(plan, cfg, overrides, verl_cfg, None)
    base = build_plan(compose_config(["experiment=smoke", f"paths.output_dir={tmp_path}"]), run_dir="r",
                      flash_attn=None)
    base_cfg = compose_config(["experiment=smoke", f"paths.output_dir={tmp_path}"])
    _, _, base_ident = identify(base, base_cfg, [], verl_config.build(base, base_cfg), None)
    assert ident == base_ident


def test_the_plan_table_shows_the_choice_and_why(smoke_cfg):
    console = Console(record=True, width=250)
    render(build_plan(smoke_cfg, run_dir="r", flash_attn=None), ["verl"], "v.yaml", console=console)
    text = console.export_text()
    row = next(line for line in text.splitlines() if "attention (actor, ref)" in line)
    assert "sdpa" in row and "flash-attn is not installed" in row
    assert "override_config.attn_implementation" in text
    row = next(line for line in text.splitlines() if "remove padding" in line)
    assert [c.strip() for c in row.split("│")][2] == "on" and "find_packed_sequence_indices" in text


def test_the_override_shows_in_the_printed_plan_and_the_snapshot(tmp_path):
    result = launch(["experiment=smoke", "model.attn_implementation=eager", "dry_run=true",
                     f"paths.output_dir={tmp_path}/out", f"paths.results_root={tmp_path}/results"])
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "attention (actor, ref)" in line)
    assert "eager" in row and "model.attn_implementation=eager" in row
    (snap,) = (tmp_path / "out" / "runs").glob("*/snapshot")
    plan = json.loads((snap / "plan.json").read_text())
    assert plan["attention"]["implementation"] == "eager"
    assert plan["attention"]["reason"].startswith("model.attn_implementation=eager")
    verl = yaml.safe_load((snap / "verl_config.yaml").read_text())
    assert verl["actor_rollout_ref"]["model"]["override_config"]["attn_implementation"] == "eager"
    assert yaml.safe_load((snap / "composed.yaml").read_text())["model"]["attn_implementation"] == "eager"


# --- against verl and transformers, on the tiny policy experiment=smoke_tiny builds ---

@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    from src.tiny_models.policy import ensure_built

    out = tmp_path_factory.mktemp("tiny") / "policy"
    assert ensure_built(out) == "built"
    return out


def test_verl_loads_the_model_with_the_plans_choice_and_transformers_refuses_flash_attention_2_here(tiny_policy):
    import torch
    from transformers import AutoModelForCausalLM
    from verl.workers.config.model import HFModelConfig

    def load(impl):
        # what verl's FSDP engine does (transformer_impl.py _build_module) with the model config verl builds
        mc = HFModelConfig(path=str(tiny_policy), override_config={"attn_implementation": impl})
        return AutoModelForCausalLM.from_pretrained(mc.local_path, torch_dtype=torch.float32, config=mc.hf_config)

    assert load("sdpa").config._attn_implementation == "sdpa"
    with pytest.raises(ImportError, match="FlashAttention2"):
        load("flash_attention_2")  # verl's default when override_config says nothing


def test_remove_padding_packed_sequences_give_the_same_logits_with_sdpa(tiny_policy):
    """verl's use_remove_padding input (transformer_impl.py prepare_model_inputs): the micro batch packed
    into one row, position ids restarting at 0 per sequence, attention_mask None, use_cache=False."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_policy), torch_dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    torch.manual_seed(0)
    seqs = [torch.randint(3, 600, (n,)) for n in (7, 12, 5)]
    with torch.no_grad():
        alone = [model(input_ids=s[None], use_cache=False).logits[0] for s in seqs]
        packed_ids = torch.cat(seqs)[None]
        restart = torch.cat([torch.arange(len(s)) for s in seqs])[None]
        packed = model(input_ids=packed_ids, position_ids=restart, attention_mask=None, use_cache=False).logits[0]
        # the control: the same row and positions with a 2D all-ones mask (transformers then does not look
        # for packed sequences) attends across the boundaries: the mask from the position ids is what works
        one_seq = model(input_ids=packed_ids, position_ids=restart, attention_mask=torch.ones_like(packed_ids),
                        use_cache=False).logits[0]
    torch.testing.assert_close(packed, torch.cat(alone), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(one_seq[len(seqs[0]):], torch.cat(alone[1:]), atol=1e-3)
