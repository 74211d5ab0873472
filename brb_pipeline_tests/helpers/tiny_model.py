"""A random-weight one-layer llama for the mlx-lm labeler, built in a folder."""

from __future__ import annotations

import json
from pathlib import Path


def tiny_model(root: Path, chat_template: str | None, answer: str | None = None) -> Path:
    """A random-weight 1-layer llama (hidden 32, 2 heads) with a WordLevel tokenizer.

    The vocabulary is numbers and punctuation, so whatever greedy decoding emits is junk a
    parser must reject. With ``answer`` (one word), the weights are rigged so greedy decoding
    always emits that word: every token embeds to the same vector, so the final hidden state h
    is the same at every position whatever the prompt, and the output head's only non-zero row,
    the answer's, is h itself.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from brb_pipeline.core.embedding.blas import ensure_fast_blas

    ensure_fast_blas()
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    root.mkdir(parents=True)
    words = ["<unk>", "<s>", "</s>"] + [str(i) for i in range(280)] + list("!?.,;:#@%&*()[]{}")
    if answer:
        words.append(answer)
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    tok.save(str(root / "tokenizer.json"))
    cfg_tok = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
               "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 512}
    if chat_template:
        cfg_tok["chat_template"] = chat_template
    (root / "tokenizer_config.json").write_text(json.dumps(cfg_tok))
    cfg = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 64,
           "vocab_size": len(words), "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "max_position_embeddings": 512,
           "bos_token_id": 1, "eos_token_id": 2}
    (root / "config.json").write_text(json.dumps(cfg))
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs.from_dict(cfg))
    if answer:
        emb = model.model.embed_tokens.weight
        model.model.embed_tokens.weight = mx.broadcast_to(emb[:1], emb.shape) + 0
        h = model.model(mx.array([[1, 5, 7]]))[0, -1]
        head = mx.zeros(model.lm_head.weight.shape)
        model.lm_head.weight = head.at[len(words) - 1].add(h)
    mx.save_safetensors(str(root / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return root
