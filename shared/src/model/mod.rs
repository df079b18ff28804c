//! The model: BERT's configuration, one layer `phi_t` with its hand-written vector-Jacobian
//! product, the connections between layers (BERT, EX-BERT and IM-BERT's Algorithm 1), the
//! classifier around them, and their FLOP counts.

pub mod bert;
pub mod config;
#[cfg(test)]
pub(crate) mod f64_process;
pub mod flops;
pub mod implicit_euler;
pub mod layer;

pub use bert::{
    BertClassifier, BertEmbeddings, BertEncoder, BertInput, BertModel, BertPooler,
    ClassifierOutput, ForwardOptions, SolveTrace,
};
