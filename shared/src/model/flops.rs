//! Analytic FLOP counts of BERT, EX-BERT and IM-BERT, per example.
//!
//! What is counted: every matrix product, a multiply-add being 2 FLOPs (`[m, k] x [k, n]` costs
//! `2 m k n`). What is not: embeddings (lookups), biases, LayerNorm, GELU, softmax, dropout, the
//! residual adds and IM's update `z - gamma * 2 (r - J^T r)`. Those are `O(seq * hidden)` or
//! `O(heads * seq^2)` per layer against `O(seq * hidden^2)` for the products, about 1% of the total
//! at BERT sizes, and they are memory-bound rather than compute-bound, so a matmul count is the
//! number that compares across connections. For the same reason EX-BERT's extra add makes it cost
//! exactly what BERT costs here.
//!
//! Per layer, sequence `s`, width `h`, feed-forward width `I` (`layer.rs`, `BertLayer`):
//!
//! | product                         | forward       | VJP `J_phi^T r` (input-gradient only)     |
//! |---------------------------------|---------------|-------------------------------------------|
//! | query, key, value dense         | `3 * 2 s h h` | `3 * 2 s h h` (`dout W^T` each)           |
//! | scores `q k^T`, context `p v`   | `2 * 2 s s h` | `4 * 2 s s h` (`dv`, `dprobs`, `dq`, `dk`) |
//! | attention output dense          | `2 s h h`     | `2 s h h`                                 |
//! | intermediate and output dense   | `2 * 2 s h I` | `2 * 2 s h I`                             |
//!
//! So a forward is `8 s h^2 + 4 s h I + 4 s^2 h` (with `I = 4h`: `24 s h^2 + 4 s^2 h`), and a VJP
//! is the same plus `4 s^2 h`: attention's backward has four batched products where its forward
//! has two. An IM layer (Algorithm 1, `ImplicitEuler::step`) runs one forward for `z_0` and then,
//! per iteration, one forward and one VJP: `(1 + T)` forwards and `T` VJPs. The diagnostic forward
//! that recording residuals adds (`inspect`) is not part of the model and is not counted.

use crate::model::config::BertConfig;
use crate::model::implicit_euler::{Connection, InnerGradient};

/// Matmul FLOPs of one layer's forward `phi_t(h)` for one example of `seq_len` tokens.
pub fn layer_forward_flops(config: &BertConfig, seq_len: usize) -> f64 {
    let (s, h, i) = (seq_len as f64, config.hidden_size as f64, config.intermediate_size as f64);
    let qkv = 3.0 * 2.0 * s * h * h;
    let scores_and_context = 2.0 * 2.0 * s * s * h; // per head `s x dh x s`, summed over heads
    let attention_output = 2.0 * s * h * h;
    let feed_forward = 2.0 * 2.0 * s * h * i;
    qkv + scores_and_context + attention_output + feed_forward
}

/// Matmul FLOPs of one layer's `J_phi(h)^T r` (`BertLayer::vjp`) for one example.
pub fn layer_vjp_flops(config: &BertConfig, seq_len: usize) -> f64 {
    let (s, h, i) = (seq_len as f64, config.hidden_size as f64, config.intermediate_size as f64);
    let dense_input_grads = 3.0 * 2.0 * s * h * h + 2.0 * s * h * h + 2.0 * 2.0 * s * h * i;
    let attention_bmms = 4.0 * 2.0 * s * s * h; // dv, dprobs, dq, dk
    dense_input_grads + attention_bmms
}

/// Matmul FLOPs of one layer under `connection`, forward pass, one example.
pub fn connection_flops(config: &BertConfig, connection: &Connection, seq_len: usize) -> f64 {
    let forward = layer_forward_flops(config, seq_len);
    match connection {
        // EX's `h_{t-1} + phi(h_{t-1})` adds an elementwise sum, which is not counted.
        Connection::Monotone | Connection::Explicit => forward,
        Connection::Implicit(im) => {
            let t = im.iterations as f64;
            (1.0 + t) * forward + t * layer_vjp_flops(config, seq_len)
        }
    }
}

/// Matmul FLOPs of the head on the [CLS] vector: the pooler dense (`h x h`) and the classifier
/// (`h x num_labels`). The number of labels comes from `id2label`, else HF's default of 2.
pub fn head_flops(config: &BertConfig) -> f64 {
    let h = config.hidden_size as f64;
    let num_labels = config.num_labels().unwrap_or(2) as f64;
    2.0 * h * h + 2.0 * h * num_labels
}

/// Matmul FLOPs of a forward pass for one example of `seq_len` tokens: every layer under its
/// connection (one entry of `connections` per layer), plus the pooler and classifier when
/// `with_head`.
pub fn forward_flops(
    config: &BertConfig,
    connections: &[Connection],
    seq_len: usize,
    with_head: bool,
) -> f64 {
    let encoder: f64 = connections.iter().map(|c| connection_flops(config, c, seq_len)).sum();
    encoder + if with_head { head_flops(config) } else { 0.0 }
}

/// Matmul FLOPs of one training step's forward and backward for one example, assuming every
/// parameter trains (embeddings included, so layer 0 also needs its input-gradient).
///
/// Reverse-mode autodiff replaces each product `C = A B` that reaches the loss by two of the same
/// size (`dA = dC B^T`, `dB = A^T dC`), so such a product costs 3 times its forward FLOPs. For BERT
/// and EX that gives the usual `3 x forward`. IM's forward already contains the VJPs, and with the
/// exact gradient the outer backward differentiates through them as well (that is the second-order
/// term): still `3 x` *IM's* forward, which is `3 x` far more than BERT's. With
/// `InnerGradient::Detached` the VJPs run on detached inputs, so they are computed once and never
/// differentiated: `3 x` the forwards plus `1 x` the VJPs. With `InnerGradient::Frozen` only
/// `z_0 = h + phi(h)` is differentiated: the iterations' forwards and VJPs cost `1 x`.
/// (Backtracking's extra trial forwards depend on the data and are not counted.)
pub fn training_flops(
    config: &BertConfig,
    connections: &[Connection],
    seq_len: usize,
    with_head: bool,
) -> f64 {
    let forward = forward_flops(config, connections, seq_len, with_head);
    let outside_graph: f64 = connections
        .iter()
        .map(|c| match c {
            Connection::Implicit(im) => {
                let t = im.iterations as f64;
                match im.gradient {
                    InnerGradient::Exact => 0.0,
                    InnerGradient::Detached => t * layer_vjp_flops(config, seq_len),
                    InnerGradient::Frozen => {
                        t * (layer_vjp_flops(config, seq_len)
                            + layer_forward_flops(config, seq_len))
                    }
                }
            }
            _ => 0.0,
        })
        .sum();
    // Everything in the graph costs 3x; what runs outside it was counted in `forward` and costs 1x.
    3.0 * forward - 2.0 * outside_graph
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::implicit_euler::{ConnectionSpec, ImplicitEuler};

    fn per_layer(spec: &str, config: &BertConfig) -> Vec<Connection> {
        ConnectionSpec::parse(spec).unwrap().per_layer(config.num_hidden_layers).unwrap()
    }

    fn relative_diff(a: f64, b: f64) -> f64 {
        (a - b).abs() / b.abs().max(1.0)
    }

    /// BERT-base at 128 tokens against the textbook count `L (24 h^2 s + 4 h s^2)` plus the head,
    /// and against the rule of thumb `2 x (matmul parameters) x tokens`.
    #[test]
    fn bert_base_matches_the_hand_count() {
        let config = BertConfig::default(); // bert-base: h 768, I 3072, 12 layers
        let (h, s, l) = (768.0, 128.0, 12.0);
        let hand = l * (24.0 * h * h * s + 4.0 * h * s * s) + 2.0 * h * h + 2.0 * h * 2.0;
        let ours = forward_flops(&config, &per_layer("bert", &config), 128, true);
        println!("BERT-base, 128 tokens: {:.3e} FLOPs (hand count {hand:.3e})", ours);
        assert!(relative_diff(ours, hand) < 1e-12, "{ours} vs {hand}");
        assert!((22.0e9..23.0e9).contains(&ours), "{ours}");

        // 110M parameters minus the 23.8M embedding ones take part in matmuls.
        let matmul_params = 110.0e6 - (30522.0 + 512.0 + 2.0) * h;
        let rule_of_thumb = 2.0 * matmul_params * s;
        let ratio = ours / rule_of_thumb;
        assert!((0.9..1.2).contains(&ratio), "ratio to 2 N s: {ratio}");
    }

    /// IM with T = 0 is EX (the same network), and EX costs what BERT costs in matmuls.
    #[test]
    fn im_t0_equals_ex_equals_bert() {
        let config = BertConfig::default();
        let bert = forward_flops(&config, &per_layer("bert", &config), 64, true);
        let ex = forward_flops(&config, &per_layer("ex", &config), 64, true);
        let im0 = forward_flops(&config, &per_layer("im:T=0", &config), 64, true);
        assert_eq!(bert, ex);
        assert_eq!(im0, ex);
    }

    /// Each iteration adds one forward and one VJP per IM layer, and the VJP's count is the
    /// forward's plus two extra attention products (`4 h s^2`).
    #[test]
    fn im_grows_linearly_in_t() {
        let config = BertConfig::tiny();
        let s = 10;
        let (h, sf) = (config.hidden_size as f64, s as f64);
        let one_iteration = 2.0 * layer_forward_flops(&config, s) + 4.0 * h * sf * sf;
        let flops = |t: usize| {
            forward_flops(&config, &per_layer(&format!("im:T={t},layers=1-1"), &config), s, false)
        };
        for t in 0..6 {
            let expected = flops(0) + t as f64 * one_iteration;
            assert!(relative_diff(flops(t), expected) < 1e-12, "T={t}: {} vs {expected}", flops(t));
        }
        // Two IM layers pay twice per iteration.
        let both = forward_flops(&config, &per_layer("im:T=3", &config), s, false);
        let bert = forward_flops(&config, &per_layer("bert", &config), s, false);
        assert!(relative_diff(both - bert, 2.0 * 3.0 * one_iteration) < 1e-12);
    }

    #[test]
    fn head_uses_id2label_else_two_labels() {
        let mut config = BertConfig::tiny();
        let h = config.hidden_size as f64;
        assert_eq!(head_flops(&config), 2.0 * h * h + 4.0 * h);
        config.id2label = Some((0..3).map(|i| (i.to_string(), format!("L{i}"))).collect());
        assert_eq!(head_flops(&config), 2.0 * h * h + 6.0 * h);
        let conns = per_layer("bert", &config);
        assert_eq!(
            forward_flops(&config, &conns, 8, true) - forward_flops(&config, &conns, 8, false),
            head_flops(&config)
        );
    }

    /// Training: 3x for everything autodiff sees; detached VJPs are computed once only.
    #[test]
    fn training_counts_the_second_order_term() {
        let config = BertConfig::tiny();
        let s = 12;
        let bert = per_layer("bert", &config);
        assert_eq!(
            training_flops(&config, &bert, s, true),
            3.0 * forward_flops(&config, &bert, s, true)
        );

        let exact = per_layer("im:T=4", &config);
        let detached = per_layer("im:T=4,grad=detached", &config);
        let fwd = forward_flops(&config, &exact, s, true);
        assert_eq!(fwd, forward_flops(&config, &detached, s, true));
        assert_eq!(training_flops(&config, &exact, s, true), 3.0 * fwd);
        let vjps = 2.0 * 4.0 * layer_vjp_flops(&config, s); // 2 layers, T = 4
        let expected = 3.0 * (fwd - vjps) + vjps;
        assert!(relative_diff(training_flops(&config, &detached, s, true), expected) < 1e-12);
        // The second-order term is what makes the exact gradient dearer than the detached one.
        assert!(
            training_flops(&config, &exact, s, true) > training_flops(&config, &detached, s, true)
        );
    }

    #[test]
    fn implicit_connection_counts_forwards_and_vjps() {
        let config = BertConfig::tiny();
        let im = Connection::Implicit(ImplicitEuler { iterations: 2, ..ImplicitEuler::default() });
        let expected = 3.0 * layer_forward_flops(&config, 7) + 2.0 * layer_vjp_flops(&config, 7);
        assert_eq!(connection_flops(&config, &im, 7), expected);
    }
}
