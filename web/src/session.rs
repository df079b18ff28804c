//! The page's model state: the runtime, the bundles loaded so far (weights stay on the device
//! while the visitor moves the T slider), the synonym index per task, and a cache of results per
//! (model, connection, clean text, perturbed text).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use shared::io::bundle::{ModelCard, WebBundle};
use shared::io::quantize::WEB_WEIGHTS_FILE;
use shared::robustness::neighbours::WordNeighbours;
use shared::{BertClassifier, BertTokenizer, ConnectionSpec};

use crate::catalog::{IndexEntry, ModelIndex};
use crate::engine::{self, Analysis, Input};
use crate::runtime::{Cpu, Gpu, Runtime};
use crate::{js, loader};

/// The longest input the demo runs; longer text is cut, and the page says so.
pub const MAX_TOKENS: usize = 128;

/// A model on whichever backend the page runs; boxed, as the two differ in size.
enum AnyModel {
    Gpu(Box<BertClassifier<Gpu>>),
    Cpu(Box<BertClassifier<Cpu>>),
}

/// A bundle on the device.
pub struct LoadedModel {
    pub entry: IndexEntry,
    pub card: ModelCard,
    pub tokenizer: Rc<BertTokenizer>,
    model: AnyModel,
    /// Where the load's time went, in ms: download, decode (parse and dequantize), the synonym
    /// index (first bundle of a task only), to the device.
    pub timings: Vec<(&'static str, f64)>,
}

impl LoadedModel {
    /// Class names: the index's, else the model card's.
    pub fn labels(&self) -> Vec<String> {
        if self.entry.labels.is_empty() {
            self.card.labels.clone()
        } else {
            self.entry.labels.clone()
        }
    }
}

pub struct Session {
    pub runtime: Runtime,
    pub index: ModelIndex,
    /// URL of the directory holding `index.json`, ending in `/`.
    base: String,
    loaded: HashMap<usize, Rc<LoadedModel>>,
    neighbours: HashMap<String, Rc<WordNeighbours>>,
    cache: HashMap<String, Arc<Analysis>>,
}

pub type Shared = Rc<RefCell<Session>>;

impl Session {
    pub fn new(runtime: Runtime, index: ModelIndex, base: String) -> Self {
        Self {
            runtime,
            index,
            base,
            loaded: HashMap::new(),
            neighbours: HashMap::new(),
            cache: HashMap::new(),
        }
    }

    pub fn loaded(&self, model: usize) -> Option<Rc<LoadedModel>> {
        self.loaded.get(&model).cloned()
    }

    pub fn neighbours(&self, task: &str) -> Option<Rc<WordNeighbours>> {
        self.neighbours.get(task).cloned()
    }
}

/// Downloads bundle `model` (weights through the cache, with progress) and puts it on the
/// device. The session is not borrowed across awaits: other tasks run in between.
pub async fn load(
    session: &Shared,
    model: usize,
    progress: impl Fn(u64, u64),
) -> Result<Rc<LoadedModel>, String> {
    if let Some(m) = session.borrow().loaded(model) {
        return Ok(m);
    }
    let (entry, url, runtime) = {
        let s = session.borrow();
        let entry = s.index.models.get(model).cloned().ok_or("no such model")?;
        let url = format!("{}{}", s.base, entry.path);
        (entry, url, s.runtime.clone())
    };
    let text = |name: &'static str| {
        let url = format!("{url}{name}");
        async move { loader::fetch_text(&url, false).await?.ok_or(format!("{url} is empty")) }
    };
    let mut timings = Vec::new();
    let mut clock = js::now_ms();
    let mut lap = |what: &'static str| {
        let now = js::now_ms();
        timings.push((what, now - clock));
        clock = now;
    };
    let config = text("config.json").await?;
    let tokenizer = text("tokenizer.json").await?;
    let card = text("imbert.json").await?;
    let (weights, _cached) =
        loader::fetch_bytes(&format!("{url}{WEB_WEIGHTS_FILE}"), entry.bytes, progress).await?;
    lap("download");
    let bundle =
        WebBundle::from_bytes(config.as_bytes(), tokenizer.as_bytes(), &weights, card.as_bytes())
            .map_err(|e| format!("model {}: {e}", entry.id))?;
    drop(weights);
    lap("decode");
    let neighbours = if session.borrow().neighbours.contains_key(&entry.task) {
        None
    } else {
        Some(word_neighbours(&bundle)?)
    };
    lap("synonym index");
    let model_on_device = match &runtime {
        Runtime::WebGpu(device) => {
            AnyModel::Gpu(Box::new(bundle.classifier::<Gpu>(device).map_err(|e| e.to_string())?))
        }
        Runtime::Cpu => AnyModel::Cpu(Box::new(
            bundle.classifier::<Cpu>(&Default::default()).map_err(|e| e.to_string())?,
        )),
    };
    lap("to the device");
    // The host copy of the weights goes here; the tokenizer and card move out of it.
    let WebBundle { tokenizer, card, .. } = bundle;
    let loaded = Rc::new(LoadedModel {
        entry: entry.clone(),
        card,
        tokenizer: Rc::new(tokenizer),
        model: model_on_device,
        timings,
    });
    let mut s = session.borrow_mut();
    if let Some(n) = neighbours {
        s.neighbours.insert(entry.task.clone(), Rc::new(n));
    }
    s.loaded.insert(model, loaded.clone());
    Ok(loaded)
}

fn word_neighbours(bundle: &WebBundle) -> Result<WordNeighbours, String> {
    let prefix = bundle.config.architecture().prefix();
    let name = "embeddings.word_embeddings.weight";
    let weight = [format!("{prefix}.{name}"), name.to_string()]
        .iter()
        .find_map(|k| bundle.tensors.get(k))
        .ok_or("the bundle has no word embeddings")?;
    let hidden = weight.shape.get(1).copied().unwrap_or(0);
    let vocab = bundle.tokenizer.inner().get_vocab(true);
    WordNeighbours::with_word_marker(&weight.data, hidden, &vocab, bundle.tokenizer.word_marker())
        .map_err(|e| e.to_string())
}

/// Class probabilities of `items` under `model` run with `spec`, one batch (not cached: the
/// flip search never asks twice).
pub async fn probabilities(
    model: &LoadedModel,
    spec: &ConnectionSpec,
    items: &[Input],
) -> Result<Vec<Vec<f32>>, String> {
    let tokenizer = &model.tokenizer;
    match &model.model {
        AnyModel::Gpu(m) => {
            let device = m.bert.embeddings.word_embeddings.weight.device();
            let m = m.clone().with_connections(spec).map_err(|e| e.to_string())?;
            engine::probabilities(&m, tokenizer, items, MAX_TOKENS, &device, true).await
        }
        AnyModel::Cpu(m) => {
            let m = m.clone().with_connections(spec).map_err(|e| e.to_string())?;
            engine::probabilities(&m, tokenizer, items, MAX_TOKENS, &Default::default(), false)
                .await
        }
    }
}

/// The analysis of `model` run with `spec` on the pair, from the cache when computed before.
pub async fn analyse(
    session: &Shared,
    model: &Rc<LoadedModel>,
    spec: &ConnectionSpec,
    clean: &Input,
    perturbed: &Input,
) -> Result<Arc<Analysis>, String> {
    let key = format!("{}|{}|{:?}|{:?}", model.entry.id, spec.to_spec_string(), clean, perturbed);
    if let Some(hit) = session.borrow().cache.get(&key) {
        return Ok(hit.clone());
    }
    let tokenizer = &model.tokenizer;
    let analysis = match &model.model {
        AnyModel::Gpu(m) => {
            let device = m.bert.embeddings.word_embeddings.weight.device();
            let m = m.clone().with_connections(spec).map_err(|e| e.to_string())?;
            engine::analyse(&m, tokenizer, clean, perturbed, MAX_TOKENS, &device, true).await?
        }
        AnyModel::Cpu(m) => {
            let m = m.clone().with_connections(spec).map_err(|e| e.to_string())?;
            engine::analyse(&m, tokenizer, clean, perturbed, MAX_TOKENS, &Default::default(), false)
                .await?
        }
    };
    let analysis = Arc::new(analysis);
    let mut s = session.borrow_mut();
    // A visitor typing produces many keys; keep the cache bounded.
    if s.cache.len() > 512 {
        s.cache.clear();
    }
    s.cache.insert(key, analysis.clone());
    Ok(analysis)
}
