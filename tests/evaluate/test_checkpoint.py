"""checkpoint=: detection of HF dirs and verl FSDP checkpoints, the exact merger command, and a real
merge of a tiny Qwen2 checkpoint with DTensor shards by verl 0.9.1's own merger on CPU."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from src.evaluate.checkpoint import ResolvedCheckpoint, hf_model_dir, merge_command, resolve_checkpoint
from src.evaluate.options import UsageError
from tests.fixtures.tiny_tokenizer import build_tiny_tokenizer

WORLD = 2

# Writes what verl's FSDPCheckpointManager writes for an actor (shards of DTensors sharded on dim 0
# over a 2-rank mesh, fsdp_config.json, huggingface/ with config + tokenizer), using torch's fake
# process group, and the full weights for comparison. Own process: the fake group is global state.
_BUILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    actor, tok_dir, world = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    tok = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=640, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      max_position_embeddings=128)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    full = {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    (actor / "huggingface").mkdir(parents=True)
    model.config.architectures = ["Qwen2ForCausalLM"]
    model.config.save_pretrained(actor / "huggingface")
    model.generation_config.save_pretrained(actor / "huggingface")
    tok.save_pretrained(actor / "huggingface")
    for rank in range(world):
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
        shard = {k: DTensor.from_local(v.chunk(world)[rank].clone(), mesh, [Shard(0)], run_check=False)
                 for k, v in full.items()}
        torch.save(shard, actor / f"model_world_size_{world}_rank_{rank}.pt")
        dist.destroy_process_group()
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    torch.save(full, actor.parent / "full_state_dict.pt")
""")


@pytest.fixture(scope="module")
def fsdp_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    tok = build_tiny_tokenizer(root / "tok")
    actor = root / "checkpoints" / "global_step_7" / "actor"
    done = subprocess.run([sys.executable, "-c", _BUILD, str(actor), str(tok), str(WORLD)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    (root / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("7")
    return actor


def test_detection(fsdp_checkpoint, tmp_path):
    actor = fsdp_checkpoint
    want = ResolvedCheckpoint("fsdp", actor, WORLD)
    assert resolve_checkpoint(actor) == want
    assert resolve_checkpoint(actor.parent) == want                  # global_step_N
    assert resolve_checkpoint(actor.parent.parent) == want           # the checkpoint dir, latest step
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"weights")
    assert resolve_checkpoint(hf) == ResolvedCheckpoint("hf", hf)


def test_incomplete_checkpoints_are_refused(fsdp_checkpoint, tmp_path):
    import shutil

    broken = tmp_path / "actor"
    shutil.copytree(fsdp_checkpoint, broken)
    (broken / f"model_world_size_{WORLD}_rank_1.pt").unlink()
    with pytest.raises(UsageError, match=r"lacks model_world_size_2_rank_R.pt for R in \[1\]"):
        resolve_checkpoint(broken)
    shutil.rmtree(broken / "huggingface")
    (broken / f"model_world_size_{WORLD}_rank_1.pt").write_bytes(b"")
    with pytest.raises(UsageError, match="huggingface/config.json is missing"):
        resolve_checkpoint(broken)
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "latest_checkpointed_iteration.txt").write_text("3")
    with pytest.raises(UsageError, match="names step 3 but .*global_step_3 does not exist"):
        resolve_checkpoint(tmp_path / "stale")


def test_merge_command_is_verls_cli(tmp_path):
    assert merge_command(tmp_path / "actor", tmp_path / "out", python="/py") == [
        "/py", "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(tmp_path / "actor"),
        "--target_dir", str(tmp_path / "out")]


def test_real_merge_on_cpu_gives_the_original_weights(fsdp_checkpoint, tmp_path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer

    target = tmp_path / "merged"
    resolved = resolve_checkpoint(fsdp_checkpoint)
    logs = []
    got = hf_model_dir(resolved, str(target), log=logs.append)
    assert got == target and "verl.model_merger merge --backend fsdp" in logs[0]
    merged = load_file(str(target / "model.safetensors"))
    full = torch.load(fsdp_checkpoint.parent / "full_state_dict.pt")
    assert set(merged) == set(full)
    for key, value in full.items():
        assert merged[key].shape == value.shape and torch.equal(merged[key], value), key
    assert AutoConfig.from_pretrained(target).num_hidden_layers == 2
    assert AutoTokenizer.from_pretrained(target, local_files_only=True)("猫")["input_ids"]
    assert [p.name for p in tmp_path.iterdir() if "merging" in p.name] == []
    # a second evaluation reuses the merge
    logs.clear()
    assert hf_model_dir(resolved, str(target), log=logs.append) == target
    assert logs == [f"using the merged model in {target}"]


def test_an_existing_merged_dir_that_is_not_a_merge_is_never_replaced(fsdp_checkpoint, testset, tmp_path, capsys):
    """Before issue 26 the finished merge replaced it (shutil.rmtree): `merged_dir=~/thesis` deleted it."""
    from src.evaluate.checkpoint import MergeError
    from src.evaluate.cli import main

    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("mine")
    resolved = resolve_checkpoint(fsdp_checkpoint)
    with pytest.raises(MergeError, match=f"merged_dir: {thesis} exists but is not a finished merge"):
        hf_model_dir(resolved, str(thesis), log=lambda _: None)
    assert [p.name for p in thesis.iterdir()] == ["chapter1.tex"]
    assert not [p for p in tmp_path.iterdir() if "merging" in p.name]
    # from the command line: refused before anything runs (vLLM or not)
    data, _ = testset
    code = main([f"checkpoint={fsdp_checkpoint}", f"merged_dir={thesis}", f"data={data}", f"out={tmp_path}/o"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"evaluate: error: merged_dir: {thesis} exists but is not a finished merge")
    assert (thesis / "chapter1.tex").read_text() == "mine" and not (tmp_path / "o").exists()


def test_merge_into_an_unwritable_dir_is_refused_up_front(fsdp_checkpoint, tmp_path):
    from src.evaluate.checkpoint import merge_target_problem
    from tests.helpers.limited_dirs import read_only_dir

    with read_only_dir(tmp_path / "ro") as ro:
        problem = merge_target_problem(resolve_checkpoint(fsdp_checkpoint), str(ro / "merged"))
        assert problem.startswith(f"merged_dir: cannot create {ro}/merged: cannot write in {ro}")


# ------------------------------------------------------------------ python -m src.evaluate.export_hf
def _export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "src.evaluate.export_hf", *args], capture_output=True, text=True,
                          timeout=300)


def test_export_hf_merges_where_the_evaluation_looks_and_a_second_export_merges_nothing(fsdp_checkpoint, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file

    root = tmp_path / "checkpoints"
    shutil.copytree(fsdp_checkpoint.parent.parent, root)  # its own copy: the default out is inside the checkpoint
    done = _export(f"checkpoint={root}")  # the checkpoint dir: its latest step
    merged = root / "global_step_7" / "actor" / "merged_hf"
    assert done.returncode == 0 and done.stdout == f"{merged}\n", done.stderr[-3000:]
    assert "verl.model_merger merge --backend fsdp" in done.stderr
    full = torch.load(fsdp_checkpoint.parent / "full_state_dict.pt")
    weights = load_file(str(merged / "model.safetensors"))
    assert set(weights) == set(full) and all(torch.equal(weights[k], v) for k, v in full.items())
    # what the evaluation would generate with, found without a merge; and the export again
    logs = []
    assert hf_model_dir(resolve_checkpoint(root), None, log=logs.append) == merged
    assert logs == [f"using the merged model in {merged}"]
    again = _export(f"checkpoint={root / 'global_step_7'}")
    assert again.returncode == 0 and again.stdout == f"{merged}\n" and "using the merged model" in again.stderr


def test_export_hf_refuses_bad_input_in_one_line_before_merging_and_a_failed_merge_leaves_nothing(
        fsdp_checkpoint, tmp_path):
    import shutil

    from tests.helpers.refusals import assert_one_line_refusal

    for args, needle in (([], "checkpoint= is required"),
                         ([f"checkpoint={tmp_path / 'none'}"], "no such path"),
                         ([f"checkpoint={fsdp_checkpoint}", "outdir=x"], "unknown argument 'outdir=x'")):
        done = _export(*args)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert_one_line_refusal(done.stderr, "export_hf: error: ", needle)
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("kept")
    done = _export(f"checkpoint={fsdp_checkpoint}", f"out={thesis}")
    assert done.returncode == 2
    assert_one_line_refusal(done.stderr, f"export_hf: error: out: {thesis} exists but is not a finished merge")
    assert [p.name for p in thesis.iterdir()] == ["chapter1.tex"]
    # a shard that is not one: verl's merger fails; one line, exit 1, no HF dir and no temp dir left
    actor = tmp_path / "actor"
    shutil.copytree(fsdp_checkpoint, actor)
    (actor / f"model_world_size_{WORLD}_rank_1.pt").write_bytes(b"not a shard")
    out = tmp_path / "hf"
    done = _export(f"checkpoint={actor}", f"out={out}")
    assert done.returncode == 1 and done.stdout == "", done.stderr[-3000:]
    assert done.stderr.splitlines()[-1].startswith(f"export_hf: error: verl's model merger failed (exit 1) on {actor}")
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if "merging" in p.name] == []


def test_export_hf_interrupted_while_merging_leaves_no_dir(fsdp_checkpoint, tmp_path):
    # SIGINT to the command 1.5 s into verl's merger (a process importing torch and verl: seconds), as Ctrl-C would
    driver = textwrap.dedent("""
        import signal, sys, threading
        from src.evaluate.export_hf import main
        threading.Timer(1.5, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)).start()
        sys.exit(main(sys.argv[1:]))
    """)
    out = tmp_path / "hf"
    done = subprocess.run([sys.executable, "-c", driver, f"checkpoint={fsdp_checkpoint}", f"out={out}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "merging 2 FSDP shards" in done.stderr  # stopped in the merge, not before it
    assert done.stderr.splitlines()[-1] == "export_hf: stopped (interrupt): no HF dir was written"
    assert list(tmp_path.iterdir()) == []
