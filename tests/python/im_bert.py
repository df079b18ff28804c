"""IM-BERT in PyTorch on top of transformers' BERT (or RoBERTa): the reference the Rust code is
checked against.

Algorithm 1: z0 = h + phi(h); for i < T: r = z - h - phi(z); z = z - gamma * grad_z ||r||^2,
with the gradient taken by autograd with create_graph=True so that training differentiates
through every iteration. r is summed over real (non-padding) tokens only.
"""

import torch


def _phi(layer, z, ext_mask):
    out = layer(z, attention_mask=ext_mask)
    return out[0] if isinstance(out, tuple) else out


def im_forward(model, input_ids, token_type_ids, attention_mask, im_layers, T, gamma, ex_layers=(),
               create_graph=True, residuals=True, gradient="exact"):
    """Logits of a BertForSequenceClassification (or RobertaForSequenceClassification) whose layers in `im_layers` use the implicit
    Euler connection (those in `ex_layers` the explicit one), and each IM layer's squared residual
    norm before each iteration and after the last.

    `gradient` is what training differentiates (the Rust spec's `grad`): "exact" builds the graph
    of the inner gradient (`create_graph=True`); "detached" keeps `r` live but takes `J^T r` as a
    constant; "frozen" takes the whole inner gradient as a constant (`autograd.grad` without
    `create_graph`), so the outer gradient flows through `z_0` and the identity path of each update.
    `create_graph=False` is for inference only: the inner gradient is then a constant, and no
    graph of it is built. `residuals=False` skips the norm after the last iteration, which costs
    one more `phi` per IM layer and is a diagnostic, not part of the model (timings use it)."""
    roberta = hasattr(model, "roberta")
    bert = model.roberta if roberta else model.bert
    dtype = next(model.parameters()).dtype
    h = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
    ext = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    tok = attention_mask[:, :, None].to(dtype)
    all_residuals = {}
    for t, layer in enumerate(bert.encoder.layer):
        if t in im_layers:
            z = h + _phi(layer, h, ext)
            res = []
            for _ in range(T):
                if not z.requires_grad:
                    z = z.requires_grad_()
                phi_z = _phi(layer, z, ext)
                r = (z - h - phi_z) * tok
                loss = (r * r).sum()
                res.append(loss)
                if not create_graph or gradient == "exact":
                    (g,) = torch.autograd.grad(loss, z, create_graph=create_graph)
                elif gradient == "frozen":
                    (g,) = torch.autograd.grad(loss, z, retain_graph=True)
                elif gradient == "detached":
                    (jtr,) = torch.autograd.grad(phi_z, z, grad_outputs=r, retain_graph=True)
                    g = 2.0 * (r - jtr)
                else:
                    raise ValueError(f"unknown gradient {gradient!r}")
                z = z - gamma * g
                if not create_graph:
                    z = z.detach()
            if residuals:
                r = (z - h - _phi(layer, z, ext)) * tok
                res.append((r * r).sum())
            all_residuals[t] = res
            h = z
        elif t in ex_layers:
            h = h + _phi(layer, h, ext)
        else:
            h = _phi(layer, h, ext)
    if roberta:
        # RobertaClassificationHead: dense + tanh + out_proj on <s>, no pooler.
        return model.classifier(h), all_residuals
    pooled = bert.pooler(h)
    return model.classifier(model.dropout(pooled)), all_residuals


def median_seconds(fn, reps):
    """Median wall time of `reps` calls of `fn`, after one warm-up call."""
    import time

    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]
