//! Broken MLC-LLM folders (copies of tests/fixtures/arch/llama-mlc with one thing changed) end in
//! a typed error naming the file, shard or tensor at fault, never a panic: quantizations and
//! model types ferrolm cannot read, a missing or truncated shard, tensor-cache records whose
//! dtype, shape and size disagree or that lie outside their shard, and quantized tensors whose
//! shapes disagree with the config. The first kinds are refused while the folder is opened,
//! before the GPU is touched; the last by the loader's check before any weight is read.

use ferrolm::engine::{Engine, LoadOptions};
use ferrolm::gpu::block_on;
use ferrolm::model::hf::HfModel;
use ferrolm::model::mlc::MlcError;
use ferrolm::weights::FileSource;
use ferrolm::Error;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/arch/llama-mlc")
}

/// A fresh copy of the fixture folder.
fn copy(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrolm-mlc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(fixture()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    dir
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, v.to_string()).unwrap();
}

/// The record of tensor `name` in the tensor cache.
fn record<'a>(cache: &'a mut Value, name: &str) -> &'a mut Value {
    let shards = cache["records"].as_array_mut().unwrap();
    shards
        .iter_mut()
        .flat_map(|s| s["records"].as_array_mut().unwrap().iter_mut())
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no record {name}"))
}

/// Open the folder as the loader does (configs, tensor cache, shards), without a GPU.
fn open(dir: &Path) -> ferrolm::Result<()> {
    let files = ferrolm::model::hf::read_dir_files(dir)?;
    let open = |f: String| {
        let p = dir.join(f);
        async move { FileSource::open(p) }
    };
    block_on(HfModel::<FileSource>::open(&files, open)).map(|_| ())
}

fn failing(tag: &str, change: impl FnOnce(&Path)) -> Error {
    let dir = copy(tag);
    change(&dir);
    let e = open(&dir).expect_err(tag);
    eprintln!("{tag}: {e}");
    let _ = std::fs::remove_dir_all(&dir);
    e
}

#[test]
fn the_fixture_opens() {
    open(&fixture()).unwrap();
}

#[test]
fn unknown_quantizations_and_model_types_are_refused_by_name() {
    for q in ["q4f16_0", "q3f16_1", "q4f16_autoawq", "e4m3_e4m3_f16"] {
        let e = failing("quant", |d| edit_json(&d.join("mlc-chat-config.json"), |c| c["quantization"] = q.into()));
        assert!(matches!(&e, Error::Unsupported(m) if m.contains(q)), "{q}: {e}");
    }
    let e = failing("type", |d| edit_json(&d.join("mlc-chat-config.json"), |c| c["model_type"] = "rwkv6".into()));
    assert!(matches!(&e, Error::Unsupported(m) if m.contains("rwkv6")), "{e}");
    // A bad value is reported in the file that holds it (config.json is made from it).
    let e = failing("layers", |d| {
        edit_json(&d.join("mlc-chat-config.json"), |c| c["model_config"]["num_hidden_layers"] = 0.into())
    });
    assert!(
        matches!(&e, Error::Model(m) if m.starts_with("mlc-chat-config.json (model_config): num_hidden_layers")),
        "{e}"
    );
}

#[test]
fn missing_and_truncated_shards_are_named() {
    let e = failing("missing", |d| std::fs::remove_file(d.join("params_shard_3.bin")).unwrap());
    assert!(matches!(&e, Error::Io { path, .. } if path.ends_with("params_shard_3.bin")), "{e}");
    let e = failing("short", |d| {
        let p = d.join("params_shard_2.bin");
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() - 100]).unwrap();
    });
    assert!(
        matches!(&e, Error::Mlc(MlcError::ShardSize { shard, expected: 12288, actual: 12188, .. }) if shard == "params_shard_2.bin"),
        "{e}"
    );
    assert!(e.to_string().contains("truncated"), "{e}");
    let e = failing("long", |d| {
        let p = d.join("params_shard_0.bin");
        let mut b = std::fs::read(&p).unwrap();
        b.push(0);
        std::fs::write(&p, b).unwrap();
    });
    assert!(matches!(&e, Error::Mlc(MlcError::ShardSize { expected: 8192, actual: 8193, .. })), "{e}");
    let e = failing("no-cache", |d| std::fs::remove_file(d.join("tensor-cache.json")).unwrap());
    assert!(matches!(&e, Error::Model(m) if m.contains("ndarray-cache.json")), "{e}");
}

#[test]
fn records_that_disagree_are_refused() {
    let cache = |d: &Path| d.join("tensor-cache.json");
    let name = "model.layers.0.self_attn.o_proj.q_weight";
    let e = failing("nbytes", |d| edit_json(&cache(d), |c| record(c, name)["nbytes"] = 1000.into()));
    assert!(
        matches!(&e, Error::Mlc(MlcError::BadRecord { tensor, msg, .. }) if tensor == name && msg.contains("1000")),
        "{e}"
    );
    let e = failing("shape", |d| edit_json(&cache(d), |c| record(c, name)["shape"] = serde_json::json!([64, 9])));
    assert!(matches!(&e, Error::Mlc(MlcError::BadRecord { tensor, .. }) if tensor == name), "{e}");
    let e = failing("dtype", |d| edit_json(&cache(d), |c| record(c, name)["dtype"] = "float16".into()));
    assert!(matches!(&e, Error::Mlc(MlcError::BadRecord { tensor, .. }) if tensor == name), "{e}");
    let e = failing("dtype-unknown", |d| edit_json(&cache(d), |c| record(c, name)["dtype"] = "float7".into()));
    assert!(matches!(&e, Error::Mlc(MlcError::UnknownDtype { dtype, .. }) if dtype == "float7"), "{e}");
    let e = failing("format", |d| edit_json(&cache(d), |c| record(c, name)["format"] = "zstd".into()));
    assert!(matches!(&e, Error::Mlc(MlcError::BadRecord { msg, .. }) if msg.contains("zstd")), "{e}");
    let e = failing("offset", |d| edit_json(&cache(d), |c| record(c, name)["byteOffset"] = 15000.into()));
    assert!(matches!(&e, Error::Mlc(MlcError::OutOfRange { tensor, begin: 15000, .. }) if tensor == name), "{e}");
    let e = failing("offset-huge", |d| edit_json(&cache(d), |c| record(c, name)["byteOffset"] = u64::MAX.into()));
    assert!(matches!(&e, Error::Mlc(MlcError::OutOfRange { .. })), "{e}");
    let e = failing("overlap", |d| edit_json(&cache(d), |c| record(c, name)["byteOffset"] = 0.into()));
    assert!(matches!(&e, Error::Mlc(MlcError::Overlap { .. })), "{e}");
    let e = failing("duplicate", |d| {
        edit_json(&cache(d), |c| {
            record(c, "model.layers.1.input_layernorm.weight")["name"] = "model.norm.weight".into()
        })
    });
    assert!(matches!(&e, Error::Mlc(MlcError::Duplicate { tensor, .. }) if tensor == "model.norm.weight"), "{e}");
    let e = failing("path", |d| edit_json(&cache(d), |c| c["records"][1]["dataPath"] = "../params_shard_1.bin".into()));
    assert!(matches!(&e, Error::Mlc(MlcError::BadShardName { .. })), "{e}");
    let e = failing("shard-format", |d| edit_json(&cache(d), |c| c["records"][0]["format"] = "zip".into()));
    assert!(matches!(&e, Error::Mlc(MlcError::BadCache { .. })), "{e}");
}

/// Every prefix of the tensor cache (a download cut short) and of mlc-chat-config.json is an
/// error, never a panic.
#[test]
fn cut_json_files_are_errors() {
    let dir = copy("cut");
    for file in ["tensor-cache.json", "mlc-chat-config.json"] {
        let full = std::fs::read(fixture().join(file)).unwrap();
        for n in (0..full.len() - 1).step_by(61) {
            std::fs::write(dir.join(file), &full[..n]).unwrap();
            assert!(open(&dir).is_err(), "{file} cut at {n} bytes was accepted");
        }
        std::fs::write(dir.join(file), &full).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Tensors that are well-formed in the cache but not what the config asks for are refused by the
/// loader's check before any weight is read (this one needs the GPU: it checks buffer limits too).
#[test]
fn quantized_tensors_must_fit_the_config() {
    let load = |tag: &str, change: &dyn Fn(&mut Value)| {
        let dir = copy(tag);
        edit_json(&dir.join("tensor-cache.json"), change);
        let opts = LoadOptions { context_length: Some(64), ..Default::default() };
        let r = block_on(Engine::load_path(&dir, &opts, &mut |_, _, _| {}));
        let _ = std::fs::remove_dir_all(&dir);
        let e = r.err().unwrap_or_else(|| panic!("{tag}: accepted"));
        eprintln!("{tag}: {e}");
        e
    };
    // The scales of 256 rows as 512 rows of one group: same bytes, wrong shape.
    let e = load("scale-shape", &|c| record(c, "lm_head.q_scale")["shape"] = serde_json::json!([512, 1]));
    assert!(matches!(&e, Error::Model(m) if m.contains("lm_head") && m.contains("q_scale")), "{e}");
    // Codes as int32: same bytes, not MLC's uint32 storage.
    let e = load("words-dtype", &|c| record(c, "model.layers.1.mlp.down_proj.q_weight")["dtype"] = "int32".into());
    assert!(matches!(&e, Error::Model(m) if m.contains("down_proj") && m.contains("U32")), "{e}");
}
