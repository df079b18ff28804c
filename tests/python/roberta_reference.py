"""RoBERTa reference values from PyTorch + transformers, for the Rust tests (tests/roberta.rs).

No RoBERTa weights can be downloaded here, so this builds a small one, seeded: a byte-level BPE
vocabulary (GPT-2's byte alphabet, then merges spelled out word by word, so that no tokenizer
training run is involved) and a random 2-layer RobertaForSequenceClassification. Called from
reference.py, which writes and checks every fixture.

Writes
- tiny-roberta/: the HF directory (config.json, model.safetensors, vocab.json, merges.txt,
  tokenizer.json and the tokenizer's config files, as transformers saves them).
- roberta_tokenizer_reference.json: transformers' ids for reference.TOKENIZER_CASES (unicode,
  emoji, very long inputs, pairs) and for special tokens written in the text, at max_len 128.
- tiny_roberta_reference.safetensors: a padded batch of sentences and pairs, every hidden state
  and the logits in float64 and float32 (plain RoBERTa); then the same model with IM (Algorithm 1,
  T=3, gamma 0.1) on layer 1: logits, loss and every parameter gradient, differentiated through
  the inner loop with create_graph=True, in float64.
"""

import json
import pathlib

import torch
from safetensors.torch import save_file
from transformers import RobertaConfig, RobertaForSequenceClassification, RobertaTokenizerFast

from im_bert import im_forward

SPECIAL = ["<s>", "<pad>", "</s>", "<unk>"]
WORDS = ("the a an and but not no is was it this that movie film story good great bad awful boring fun "
         "best worst love hate funny dull i you he she they we what who how why where when do does "
         "question answer cat dog man woman play plays sat on mat in of to for with very really too so "
         "hello world wonderful delight start finish gripping heartfelt hated weather nice today raining "
         "streets flooded river premise hypothesis learn rust").split()
CONFIG = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
              max_position_embeddings=130, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
              layer_norm_eps=1e-5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)
# Special tokens written in the text stay whole (HF registers them as added tokens).
SPECIAL_TOKEN_CASES = [
    ("a <mask> film </s> and <s> more <pad>", None),
    ("Hello <mask>!", "the<unk>end"),
]
IM_LAYERS = [1]
IM_T = 3
IM_GAMMA = 0.1


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each of the 256 bytes, in byte order: printable Latin-1
    bytes stand for themselves, the others are shifted past 255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, shift = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + shift))
            shift += 1
    return out


def bpe_files(directory: pathlib.Path) -> None:
    """vocab.json and merges.txt: the byte alphabet, then for each word (with and without its
    leading-space byte "Ġ") the merges that build it left to right."""
    alphabet = byte_alphabet()
    vocab = {t: i for i, t in enumerate(SPECIAL + alphabet)}
    merges = []
    for word in WORDS:
        for spelled in (word, alphabet[ord(" ")] + word):
            pieces = list(spelled)
            while len(pieces) > 1:
                merged = pieces[0] + pieces[1]
                if merged not in vocab:
                    merges.append(f"{pieces[0]} {pieces[1]}")
                    vocab[merged] = len(vocab)
                pieces = [merged] + pieces[2:]
    vocab["<mask>"] = len(vocab)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")


def encode_batch(tok, items):
    """Sentences and pairs, each encoded alone and padded by hand with <pad> (a pair call would
    append text_b to every row)."""
    rows = [tok(a, b, truncation=True, max_length=128)["input_ids"] if b is not None
            else tok(a, truncation=True, max_length=128)["input_ids"] for a, b in items]
    seq = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), seq), CONFIG["pad_token_id"], dtype=torch.long)
    attention_mask = torch.zeros(len(rows), seq, dtype=torch.long)
    for i, ids in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
    return input_ids, torch.zeros_like(input_ids), attention_mask


def roberta_reference(out: pathlib.Path, sentences, tokenizer_cases) -> None:
    directory = out / "tiny-roberta"
    bpe_files(directory)
    # As a user's directory with only the two files would load.
    tok = RobertaTokenizerFast.from_pretrained(directory)
    assert len(tok) == len(json.loads((directory / "vocab.json").read_text())), len(tok)
    tok.save_pretrained(directory)

    cases = []
    for text_a, text_b in list(tokenizer_cases) + SPECIAL_TOKEN_CASES:
        e = tok(text_a, text_b, truncation=True, max_length=128)
        cases.append({"text_a": text_a, "text_b": text_b, "input_ids": e["input_ids"],
                      "token_type_ids": [0] * len(e["input_ids"])})
    (out / "roberta_tokenizer_reference.json").write_text(
        json.dumps({"max_len": 128, "cases": cases}, ensure_ascii=False, indent=1))

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=len(tok), attn_implementation="eager", **CONFIG)
    model = RobertaForSequenceClassification(config).eval()
    # Larger-than-init weights, so that second-order terms are not negligible.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(directory, safe_serialization=True)
    # The same weights as a legacy pytorch_model.bin, for the .bin loader.
    (out / "tiny-roberta-bin").mkdir(exist_ok=True)
    (out / "tiny-roberta-bin" / "config.json").write_text((directory / "config.json").read_text())
    torch.save(model.state_dict(), out / "tiny-roberta-bin" / "pytorch_model.bin")

    input_ids, token_type_ids, attention_mask = encode_batch(tok, sentences)
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask}
    for dtype, tag in ((torch.float64, ""), (torch.float32, "f32.")):
        m = model.to(dtype)
        with torch.no_grad():
            o = m(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        for i, h in enumerate(o.hidden_states):
            tensors[f"{tag}hidden.{i}"] = h.contiguous()
        tensors[f"{tag}logits"] = o.logits.contiguous()

    model = model.double()
    labels = torch.arange(input_ids.shape[0]) % CONFIG["num_labels"]
    logits, _ = im_forward(model, input_ids, token_type_ids, attention_mask, IM_LAYERS, IM_T, IM_GAMMA)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad(loss, [p for _, p in model.named_parameters()], allow_unused=True)
    tensors.update({"labels": labels, "im.logits": logits.detach(), "im.loss": loss.detach().reshape(1)})
    for n, g in zip(names, grads):
        if g is not None:
            tensors[f"im.grad.{n}"] = g.contiguous()
    model.float()
    save_file(tensors, out / "tiny_roberta_reference.safetensors")
    (out / "tiny_roberta_reference.json").write_text(json.dumps(
        {"connection": f"im:T={IM_T},gamma={IM_GAMMA},layers={IM_LAYERS[0]}-{IM_LAYERS[-1]}", "dtype": "float64",
         "items": sentences}, ensure_ascii=False))
