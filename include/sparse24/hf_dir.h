// Hugging Face checkpoint directories: config.json plus model.safetensors, or shards listed by
// model.safetensors.index.json ("weight_map": tensor name -> shard file); the weights dense, in sparse24's
// checkpoint layout or in compressed-tensors' sparse-24-bitmask (checkpoint.h). A pickle checkpoint
// (pytorch_model.bin) is refused, never unpickled. Everything else in the directory (tokenizer files,
// sentence-transformers modules) is carried along by writers as it is.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sparse24/bitmask24.h"
#include "sparse24/checkpoint.h"

namespace sparse24 {

struct HfDir {
  std::string dir;
  std::string config_json;          // config.json's text (a JSON object; its fields are the loader's)
  std::vector<std::string> shards;  // the safetensors files, as paths
  Checkpoint weights;               // every shard's tensors, decoded (2:4 layers as Compressed)
};

// The same directory read in place, as the model loaders read it: its shards memory-mapped, dense tensors
// left in the files (views into `files`; a 16 GB checkpoint is not copied into memory first), 2:4 layers
// decoded. Movable; the views stay valid as long as it lives.
struct MappedHfDir {
  struct Tensor {
    CheckpointTensorView t;
    std::shared_ptr<const MappedFile> file;  // the mapping t.dense's bytes are in (shares its shard)
  };
  std::string dir;
  std::string config_json;
  std::vector<std::string> shards;
  std::vector<std::shared_ptr<MappedSafeTensors>> files;  // one per shard (shared: what a model keeps mapped)
  std::map<std::string, std::string> metadata;            // every shard's __metadata__ (layout keys aside)
  std::vector<Tensor> tensors;                            // shard by shard, each in file order
};

// DIR read a shard at a time (what map_hf_dir keeps all of; convert and inspect need one at a time): the
// constructor reads config.json and the shard list, shard(i) maps shard i, checks it against the config's
// sparsity config and reads it in place (read_checkpoint_view: 2:4 layers decoded, the pages of the tensors
// they came from dropped), refusing a tensor an earlier shard had. Errors as map_hf_dir's.
class HfDirReader {
 public:
  struct Shard {
    std::unique_ptr<MappedSafeTensors> file;
    CheckpointView part;  // views into *file
  };
  explicit HfDirReader(std::string dir);
  const std::string& dir() const { return dir_; }
  const std::string& config_json() const { return config_json_; }
  const std::optional<SparsityConfig>& sparsity_config() const { return sparsity_; }
  const std::vector<std::string>& shards() const { return shards_; }  // paths
  Shard shard(size_t i, bool defer_sparse24 = false);  // (read_checkpoint_view's; those layers' pages kept)

 private:
  std::string dir_, config_path_, config_json_;
  std::optional<SparsityConfig> sparsity_;
  std::vector<std::string> shards_;
  std::set<std::string> seen_;
};

// Reads and validates DIR: config.json must be a JSON object; shard names must be plain file names inside
// DIR; every shard is validated (checkpoint.h) and a tensor may appear in one shard only; a config whose
// sparsity_config names another format than the sparse-24-bitmask layers it comes with is refused. Error
// "DIR: ..." naming the problem. read_hf_dir is map_hf_dir plus a copy of every dense tensor.
// defer_sparse24: sparse24 layers left to decode when asked for (CheckpointTensorView::decode), their
// pages kept until then.
MappedHfDir map_hf_dir(const std::string& dir, bool defer_sparse24 = false);
HfDir read_hf_dir(const std::string& dir);

// Refuses a config whose sparsity_config (`sc`, from config.json `config_what`) names another format or
// structure than the sparse-24-bitmask layers `st` holds (if it holds any): Error "<config_what>:
// sparsity_config says format '...', structure '...', but <st_what> holds sparse-24-bitmask layers".
void check_sparsity_config(const std::optional<SparsityConfig>& sc, const SafeTensorsView& st,
                           const std::string& config_what, const std::string& st_what);

// The config.json text that goes with `weights` written in layout `to`: quantization_config.sparsity_config
// set (targets: the compressed layers) for a sparse-24-bitmask output that keeps layers compressed, removed
// otherwise; a config that needs no change is returned as it is (nullopt in, nullopt out unless a
// sparsity config is needed).
std::optional<std::string> config_for_layout(const std::optional<std::string>& config_json,
                                             const Checkpoint& weights, CheckpointFormat to,
                                             const std::string& what);

// Writes OUT_DIR (which must not exist) with the weights in layout `to` as one model.safetensors, config.json
// with the sparsity config compressed-tensors wants (sparse-24-bitmask) or without it, every other
// regular file and folder of `src.dir` (when not empty) except the old weights and shard index, copied,
// and the `files` given (name -> contents; e.g. a tokenizer made from a GGUF file). Built in a temporary
// sibling directory and renamed into place, so a failure leaves nothing behind.
void write_hf_dir(const HfDir& src, const Checkpoint& weights, CheckpointFormat to,
                  const std::string& out_dir, const std::map<std::string, std::string>& files = {});

// The same directory written shard by shard, for a model never whole in memory: add() writes each part as a
// safetensors file at once; finish() names them model-0000i-of-0000n.safetensors with
// model.safetensors.index.json (one part: model.safetensors), writes config.json (its sparsity config
// over all parts) and the other files, and renames the directory into place. Destroyed unfinished, it
// removes what it wrote.
class HfDirWriter {
 public:
  // src_dir: the files to carry along ("" for none); src_shards: its weight files, not carried.
  HfDirWriter(std::string src_dir, std::vector<std::string> src_shards,
              std::optional<std::string> config_json, CheckpointFormat to, std::string out_dir,
              std::map<std::string, std::string> files = {});
  ~HfDirWriter();
  HfDirWriter(const HfDirWriter&) = delete;
  HfDirWriter& operator=(const HfDirWriter&) = delete;
  void add(const Checkpoint& part);
  void finish();

 private:
  std::string src_dir_, out_, tmp_;
  std::vector<std::string> src_shards_;
  std::optional<std::string> config_;
  CheckpointFormat to_;
  std::map<std::string, std::string> files_;
  std::vector<std::vector<std::string>> names_;  // per part, the tensors as stored
  std::vector<std::string> sparse_prefixes_;
  double zeros_ = 0, total_ = 0;
  uint64_t bytes_ = 0;
  bool done_ = false;
};

// `sparse24 convert`, as a library (engine::convert_model, decoder.h, picks among these and GGUF files).
// Errors "<path>: ..." name the problem; a failure leaves nothing written.
struct ConvertReport {
  size_t shards = 0, tensors = 0;         // read (shards: 0 for one file)
  int64_t sparse_in = 0, sparse_out = 0;  // 2:4 weights read; kept 2:4 in the output
  SparsifyReport sparsify;
  std::string config_written;  // a checkpoint file's config written ("" for none)
};
// One checkpoint file (any of the three layouts) as OUT in layout o.to (convert_weights), with its
// config.json: `config_in` ("" for none) is read and checked against IN first; the config the output needs
// (config_for_layout) is written to `config_out`, unless that is the input's own file, which is refused when
// it would change.
ConvertReport convert_checkpoint_file(const std::string& in, const std::string& out, const ConvertOptions& o,
                                      const std::string& config_in, const std::string& config_out);
// A Hugging Face directory as OUT_DIR (which must not exist; HfDirWriter), a shard at a time: each input
// shard's tensors are copied, converted and written before the next shard's, so memory holds one shard of
// weights (and the input's 2:4 ones) and the output has the input's shards. config.json gets the sparsity
// config the output needs; every other file is carried along.
ConvertReport convert_hf_dir(const std::string& in_dir, const std::string& out_dir, const ConvertOptions& o);

// What a checkpoint holds, tensor by tensor (`sparse24 inspect DIR|CHECKPOINT.safetensors`): a Hugging Face
// directory or one .safetensors file in any of the three layouts, read in place (checkpoint.h validates
// every 2:4 layer).
struct CheckpointInfo {
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;  // the dense shape
    std::string dtype;           // stored type (safetensors' name; a 2:4 weight's values)
    bool sparse = false;
    uint64_t bytes = 0;  // stored: a 2:4 weight's values, metadata and scales (a scaled I8 one's scales too)
    int64_t scale_group = 0;  // int8 values with scales (2:4 or dense): positions per scale
  };
  std::string model_type;  // config.json's, for a directory ("" if none)
  size_t shards = 0;
  std::optional<SparsityConfig> sparsity_config;  // config.json's
  std::vector<Tensor> tensors;                    // shard by shard, each in file order
  int64_t parameters = 0, sparse_parameters = 0;  // elements of every tensor; of the 2:4 weights
  uint64_t bytes = 0, sparse_bytes = 0;
};
CheckpointInfo inspect_checkpoint(const std::string& path);
}  // namespace sparse24
