"""transformers objects keyed by their content, in fresh processes (issue 35).

A tiny GPT-2 built from a config and a BPE tokenizer trained in code (nothing
downloaded). Before: a model built by the caller never hit in a new process
(``GenerationConfig._original_object_hash`` is ``hash()`` of a string, salted per
process), a fast tokenizer keyed differently once called (its backend keeps the
padding and truncation of its last call), and ``TrainingArguments`` were keyed by
their output and logging paths and run names.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys

import pytest

from conftest import SRC, Project, require

require("torch")
transformers = require("transformers")
require("tokenizers")

from memolab import hashing  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

BUILD = r'''
import os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, TrainingArguments

transformers.logging.set_verbosity_error()
TEXTS = ["hello world", "the quick brown fox", "jumps over the lazy dog", "hello fox"]


def model():
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0,
                     eos_token_id=0, pad_token_id=1)
    return GPT2LMHeadModel(cfg)


def tokenizer():
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]", "[PAD]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def args(out="out", **kw):
    return TrainingArguments(**{"output_dir": out, "seed": 1, "learning_rate": 1e-3, "report_to": [], **kw})


def use(m, tok, a):
    """What training and inference do to these objects."""
    enc = tok(TEXTS, padding=True, truncation=True, max_length=8, return_tensors="pt")
    with torch.no_grad():
        m(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=enc["input_ids"])
        m.generate(enc["input_ids"][:1], attention_mask=enc["attention_mask"][:1], max_new_tokens=2,
                   do_sample=False)
    a.device, a.n_gpu, a.world_size, a.to_dict()
'''

KEYS = BUILD + r'''
import json
import memolab
from memolab import memo, hashing


class Ran(list):
    pass


memolab.register_opaque(Ran)
RAN = Ran()


@memo
def finetune(m, tok, a):
    RAN.append("finetune")
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    torch.manual_seed(a.seed)
    opt = torch.optim.SGD(m.parameters(), lr=a.learning_rate)
    loss = m(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=enc["input_ids"]).loss
    loss.backward()
    opt.step()
    return {"loss": float(loss), "model": m}


@memo
def take(x):
    return 0


m, tok, a = model(), tokenizer(), args(out=sys.argv[1])
objs = {"model": m, "config": m.config, "generation_config": m.generation_config, "tokenizer": tok, "args": a}
before = {k: hashing.hash_value(v) for k, v in objs.items()}
use(m, tok, a)
after = {k: hashing.hash_value(v) for k, v in objs.items()}
out = finetune(model(), tokenizer(), args(out=sys.argv[1]))
print(json.dumps({"before": before, "after": after, "ran": list(RAN), "loss": out["loss"],
                  "result_key": take.key(out["model"])[2], "fresh_trained_key": take.key(trained())[2]}))
'''

TRAINED = r'''

def trained():
    """The finetuned model, made anew in this process (what the stored result must key as)."""
    m, tok, a = model(), tokenizer(), args()
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    torch.manual_seed(a.seed)
    opt = torch.optim.SGD(m.parameters(), lr=a.learning_rate)
    m(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=enc["input_ids"]).loss.backward()
    opt.step()
    return m
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    proj = Project(tmp_path_factory.mktemp("hf") / "proj")
    proj.write("keys.py", KEYS.replace("\nimport json\n", TRAINED + "\nimport json\n", 1))
    env = {"HF_HOME": str(proj.root / "hf"), "MEMOLAB_HASH_THREADS": "1"}
    first = proj.run_json("keys.py", "out1", env={**env, "PYTHONHASHSEED": "1"}, timeout=300)
    second = proj.run_json("keys.py", "out2", env={**env, "PYTHONHASHSEED": "2"}, timeout=300)
    return first, second


@pytest.mark.slow
def test_a_model_and_tokenizer_built_by_the_caller_hit_in_a_new_process(runs):
    first, second = runs
    assert first["ran"] == ["finetune"]
    assert second["ran"] == [], "a new process (another PYTHONHASHSEED, another output_dir) must hit"
    assert second["loss"] == first["loss"]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["model", "config", "generation_config", "tokenizer", "args"])
def test_each_object_keys_alike_across_processes_and_after_use(runs, what):
    first, second = runs
    keys = {first["before"][what], first["after"][what], second["before"][what], second["after"][what]}
    assert len(keys) == 1, (what, first, second)


@pytest.mark.slow
def test_a_returned_model_keys_alike_computed_loaded_and_rebuilt(runs):
    first, second = runs
    assert first["result_key"] == second["result_key"] == first["fresh_trained_key"] == second["fresh_trained_key"]


# -- in-process rules -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    ns: dict = {}
    exec(compile(BUILD, "build", "exec"), ns)
    return ns


H = hashing.hash_value


def test_the_content_counts(built, tmp_path):
    m, tok = built["model"](), built["tokenizer"]()
    key, tkey = H(m), H(tok)
    import torch

    with torch.no_grad():
        m.lm_head.weight[0, 0] += 1
    assert H(m) != key
    m2 = built["model"]()
    m2.generation_config.max_new_tokens = 7  # a setting of the generation config counts
    assert H(m2) != key
    m3 = built["model"]()
    m3.config.resid_pdrop = 0.5
    assert H(m3) != key
    tok2 = built["tokenizer"]()
    tok2.add_tokens(["newtoken"])
    assert H(tok2) != tkey
    tok3 = built["tokenizer"]()
    tok3.padding_side = "left"  # the wrapper's own settings count
    assert H(tok3) != tkey
    tok4 = built["tokenizer"]()
    tok4.backend_tokenizer.pre_tokenizer = None  # the backend's pipeline counts
    assert H(tok4) != tkey
    m4 = built["model"]()
    assert H(m4) == key
    m4.transformer.h[0].register_forward_hook(lambda mod, i, o: (o[0] + 1, *o[1:]))  # a steering hook counts
    assert H(m4) != key


def test_the_salted_generation_config_hash_is_left_out(built):
    g = built["model"]().generation_config
    assert getattr(g, "_original_object_hash", None) is not None  # from_model_config set it
    key = H(g)
    g._original_object_hash = 12345  # what another process computes for it
    assert H(g) == key


def test_a_tokenizer_keys_the_same_before_and_after_its_own_call(built):
    tok = built["tokenizer"]()
    key = H(tok)
    tok(["hello world", "the fox"], padding="max_length", truncation=True, max_length=6, pad_to_multiple_of=2)
    assert tok.backend_tokenizer.padding is not None and tok.backend_tokenizer.truncation is not None
    assert H(tok) == key
    # a bare tokenizers.Tokenizer uses its padding in encode(): there it counts
    bare = built["tokenizer"]().backend_tokenizer
    bare_key = H(bare)
    bare.enable_padding(length=10)
    assert H(bare) != bare_key


def test_cached_property_values_are_left_out_of_a_model(built):
    GPT2LMHeadModel = transformers.GPT2LMHeadModel

    class WithVocab(GPT2LMHeadModel):
        @functools.cached_property
        def vocab_ids(self):
            return list(range(self.config.vocab_size))

    import torch

    torch.manual_seed(0)
    m = WithVocab(built["model"]().config)
    key = H(m)
    assert len(m.vocab_ids) == 64 and "vocab_ids" in vars(m)
    assert H(m) == key


def test_training_arguments_key_by_the_settings_that_change_results(built, tmp_path):
    args = built["args"]
    base = H(args(out=str(tmp_path / "a")))
    same = [dict(out=str(tmp_path / "b")), dict(run_name="another"), dict(logging_dir=str(tmp_path / "logs")),
            dict(report_to="none"), dict(disable_tqdm=True), dict(hub_token="hf_secret"),
            dict(dataloader_pin_memory=False), dict(dataloader_persistent_workers=True, dataloader_num_workers=0),
            dict(log_level="error"), dict(save_on_each_node=True), dict(ddp_timeout=60)]
    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    for kw in same:
        kw = {k: v for k, v in kw.items() if k in fields or k == "out"}  # logging_dir: transformers 4 only
        out = kw.pop("out", str(tmp_path / "a"))
        assert H(args(out=out, **kw)) == base, kw
    differ = [dict(learning_rate=2e-3), dict(seed=2), dict(per_device_train_batch_size=4), dict(num_train_epochs=2),
              dict(weight_decay=0.1), dict(lr_scheduler_type="cosine"), dict(gradient_accumulation_steps=2),
              dict(max_grad_norm=0.5), dict(dataloader_num_workers=2), dict(logging_steps=7),
              dict(eval_strategy="steps", eval_steps=5), dict(label_smoothing_factor=0.1)]
    for kw in differ:
        assert H(args(out=str(tmp_path / "a"), **kw)) != base, kw
    from memolab.transformers.keys import NOT_RESULTS

    listed = NOT_RESULTS & fields
    assert "output_dir" in listed and "learning_rate" not in listed and "seed" not in listed


def test_import_memolab_transformers_keys_imports_no_transformers():
    code = ("import sys, memolab, memolab.transformers.keys\n"
            "print(sorted(m for m in ('transformers', 'tokenizers', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip() == "[]"


def test_a_trainer_argument_is_refused_naming_its_path(built, tmp_path):
    """A Trainer is a run (log history with run times, callbacks, optimizer): refused as Lightning's is."""
    import torch

    from memolab.errors import HashError

    rows = [{"input_ids": torch.tensor([1, 2, 3]), "labels": torch.tensor([1, 2, 3])}] * 2
    trainer = transformers.Trainer(model=built["model"](), args=built["args"](out=str(tmp_path / "t"), use_cpu=True),
                                   train_dataset=rows)
    with pytest.raises(HashError) as ei:
        hashing.hash_value({"trainer": trainer})
    assert ei.value.path == "['trainer']" and "a transformers Trainer is a live handle" in str(ei.value)
    assert "build the Trainer inside the memoized function" in str(ei.value)
