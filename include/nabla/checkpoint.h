/* nabla checkpoints: lists of named tensors saved to and loaded from safetensors files.
 *
 * File format (readable by PyTorch's safetensors and other tools): an 8-byte little-endian
 * header length N, N bytes of JSON header
 *   {"<name>": {"dtype": "F32"|"F64"|"I64"|"BOOL", "shape": [...], "data_offsets": [b, e]}, ...}
 * (an optional "__metadata__" object of string values), padded with spaces, then the row-major
 * little-endian data; offsets are bytes into the data section, which the tensors cover exactly
 * once with no gaps or overlaps.
 *
 * nabla writes the CRC-32 (zlib's) of the data section into __metadata__ under
 * NB_SAFETENSORS_CRC_KEY as 8 lowercase hex digits, and beside it, under
 * NB_SAFETENSORS_CRC_COVERS_KEY, what that checksum was computed for: "<index> <bytes>", the
 * CRC-32 of the file's tensor index (8 lowercase hex digits; see below) and the length of the
 * data section in decimal. A load verifies the checksum only when the file's own index and data
 * length are what the covers entry says: metadata copied by another tool into a file it wrote
 * (other tensors, offsets or length) is then not taken for corruption, it is ignored. A file
 * with a checksum but no covers entry (nabla before it wrote one) is verified as before. Files
 * without a checksum (written by PyTorch and other tools) load unchecked.
 * The tensor index: for each tensor in order of its data offsets (then by name), its name, its
 * dtype ("F32"), its dims in decimal joined by ',', its begin and its end offsets, each
 * followed by a NUL byte, the tensor's last one by a newline instead. */
#ifndef NABLA_CHECKPOINT_H
#define NABLA_CHECKPOINT_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor and the name it is stored under. Neither is owned by this struct. */
typedef struct {
    const char *name;
    nb_tensor *tensor;
} nb_named_tensor;

/* One string entry of a file's __metadata__. Neither string is owned by this struct. */
typedef struct {
    const char *key;
    const char *value;
} nb_metadata_entry;

/* The __metadata__ keys of the data checksum and of what it covers; reserved: callers cannot
 * set them. */
#define NB_SAFETENSORS_CRC_KEY "nabla.data_crc32"
#define NB_SAFETENSORS_CRC_COVERS_KEY "nabla.data_crc32_covers"

/* Writes the n tensors (any layout, f32/f64/i64/bool) to path. The file is written to a new
 * temporary file of a unique name in path's directory (path + ".tmp-" + 10 random characters
 * of [a-z0-9], created exclusively, so a file or symlink already there is never opened or
 * followed), flushed to disk, renamed over path, and the directory is flushed. So a crash or
 * failure mid-save leaves any previous file at path intact, a failed save removes its
 * temporary, and concurrent saves to one path leave one of them whole. A successful save then
 * removes the stale temporaries of path (see nb_safetensors_remove_stale_temporaries), so
 * saves killed midway do not pile up. Names must be non-empty, unique UTF-8 and not
 * "__metadata__". Returns false with an error naming the file on failure. */
bool nb_safetensors_save(const char *path, int n, const nb_named_tensor *tensors);

/* Removes the temporaries that saves to path killed midway left behind, and returns how many
 * (-1 with an error if path's directory cannot be read). The rule: a save holds an exclusive
 * flock(2) on its temporary from its creation until it is renamed over path, so a temporary
 * that can be locked belongs to no running save (on this host, or over NFS where locks reach
 * the server). Only regular files named exactly path + ".tmp-" + 10 characters of [a-z0-9]
 * are considered, symlinks are not followed, and each is unlinked only while locked and
 * still the file that was locked, so a running save never loses its file. On a file system
 * without flock nothing can be locked and nothing is removed. Loads never read temporaries. */
int nb_safetensors_remove_stale_temporaries(const char *path);

/* nb_safetensors_save, also writing n_meta string entries into __metadata__ (for example a
 * model's configuration). Keys must be non-NULL, unique, valid UTF-8 and not
 * NB_SAFETENSORS_CRC_KEY; values non-NULL valid UTF-8. Nothing is owned or kept. */
bool nb_safetensors_save_with_metadata(const char *path, int n, const nb_named_tensor *tensors,
                                       int n_meta, const nb_metadata_entry *meta);

/* Copies the tensors of path into the n existing tensors of `into`, all or nothing. The file
 * must hold exactly these names (no missing or extra ones), each with the destination's dtype
 * and shape. A path that is not a regular file (a directory, FIFO or device) is refused
 * without being opened, so it never blocks. Everything is validated before any destination is
 * written: on any problem (unreadable file, bad header length, invalid JSON, unknown dtype,
 * offsets out of range, overlapping or uncovered data, bool bytes other than 0/1, mismatches)
 * it returns false with an error naming the file and what was wrong (for names, dtypes and
 * shapes: every missing, extra and mismatched tensor), and no destination changes. Autograd
 * does not see the copy (like PyTorch's load_state_dict). nb_safetensors_load_opts below
 * loads partially, converts dtypes, renames and reports. */
bool nb_safetensors_load(const char *path, int n, const nb_named_tensor *into);

/* ---- Loading with options: name maps, partial loads, dtype conversion, a report --------- */
/* One renaming rule of a name map. `from` is a tensor name of the file in which one '*' may
 * stand for any run of characters (dots included); the first rule of a map that matches a
 * name applies, and names no rule matches are kept as they are. parts says what the tensor
 * becomes, each name of `to` with its '*' replaced by what the '*' of `from` matched:
 *   1      renamed to to[0];
 *   2..4   split along dim 0 into `parts` equal slices named to[0], to[1], ... (PyTorch's packed
 *          in_proj_weight [3 E, E] and in_proj_bias [3 E] into queries, keys and values);
 *   0      dropped (not loaded, not reported as unexpected: state a model recomputes). */
#define NB_NAME_RULE_MAX_PARTS 4
typedef struct {
    const char *from;
    const char *to[NB_NAME_RULE_MAX_PARTS];
    int parts;
} nb_name_rule;

/* A list of rules, tried in order. The built-in maps below are static: never freed. */
typedef struct {
    const char *name; /* for messages, e.g. "pytorch" */
    int n_rules;
    const nb_name_rule *rules;
} nb_name_map;

/* PyTorch's nn.MultiheadAttention and nn.TransformerEncoderLayer names onto nabla's nb_mha and
 * nb_transformer_block: X.in_proj_weight / X.in_proj_bias split into X.W_query, X.W_key,
 * X.W_value (.weight / .bias), and inside an encoder layer self_attn -> attn, linear1 ->
 * ff.fc1, linear2 -> ff.fc2 (norm1, norm2 and out_proj keep their names). So a model written in
 * PyTorch with nabla's module names around these layers (a TransformerLM's tok_emb, pos_emb,
 * blocks.N, norm_f, head, with norm_first encoder layers) loads into nabla's. Static. */
const nb_name_map *nb_name_map_pytorch(void);

/* Hugging Face's Llama names (LlamaForCausalLM's state_dict) onto the Llama-style LM of
 * <nabla/blocks.h> (Meta's names): model.embed_tokens -> tok_embeddings, model.layers.N.
 * self_attn.{q,k,v,o}_proj -> layers.N.attention.{wq,wk,wv,wo}, mlp.{gate,up,down}_proj ->
 * feed_forward.{w1,w3,w2}, input_layernorm -> attention_norm, post_attention_layernorm ->
 * ffn_norm, model.norm -> norm, lm_head -> output; rotary_emb.inv_freq (older files) dropped.
 * No permutation of q and k: HF's checkpoints hold q_proj and k_proj rows in the layout of its
 * rotate_half RoPE (pairs i and i + head_dim / 2), the layout nabla's blk_rope uses. (Meta's
 * original checkpoints pair 2i and 2i + 1, and HF's conversion script permutes their rows;
 * those files need that permutation, not this map.) A model with tied embeddings has no
 * lm_head.weight: load it partially and copy tok_embeddings.weight into output.weight. Static. */
const nb_name_map *nb_name_map_hf_llama(void);

/* How to load. Zero-initialised ({0}) is strict, exact dtypes and no name map. */
typedef struct {
    /* Load the tensors that match and skip the rest: destinations the file lacks and file
     * tensors nothing takes are listed in the report instead of failing the load (PyTorch's
     * strict=False). A tensor found on both sides with another shape (or dtype, below) is
     * still an error, as in PyTorch. */
    bool partial;
    /* F64 file tensors load into F32 destinations (rounded to nearest) and F32 into F64.
     * A finite value beyond float32's range is an error, not an infinity. */
    bool convert_dtype;
    /* Renames the file's tensors before they are matched (NULL: none). */
    const nb_name_map *name_map;
} nb_load_opts;

/* What a load found. Filled by the loads that take one (its previous contents are
 * overwritten, not freed), on success and failure alike; the arrays and strings belong to the
 * report: release them with nb_load_report_free. Names of destinations are as the caller (or
 * nb_module_load_opts, relative to the module) gave them; names of file tensors are as the
 * file has them, followed by " (as 'NAME')" when a name map or prefix renamed them. */
typedef struct {
    int n_loaded;       /* destinations written (0 when the load failed) */
    int n_converted;    /* of them, converted between F32 and F64 */
    int n_missing;      /* destinations the file does not hold */
    char **missing;     /*   their names */
    int n_unexpected;   /* file tensors no destination takes */
    char **unexpected;  /*   their names */
    int n_mismatched;   /* tensors on both sides that do not fit (shape, dtype, split) */
    char **mismatched;  /*   "tensor 'NAME': shape [2, 3] in the file, expected [3, 2]" */
    char *file_prefix;  /* a prefix removed from the file's names to match ("" if none) */
    char *model_prefix; /* a prefix removed from the destinations' names ("" if none) */
} nb_load_report;

/* Frees what a load put in r and zeroes it (safe on a zeroed report and on NULL). */
void nb_load_report_free(nb_load_report *r);
/* Prints r: counts, then every missing, unexpected and mismatched tensor, one a line. */
void nb_load_report_fprint(FILE *f, const nb_load_report *r);

/* nb_safetensors_load with options (NULL: strict, as nb_safetensors_load) and a report (may be
 * NULL). Still all or nothing: if anything is refused (every missing, unexpected or mismatched
 * tensor in a strict load, any mismatch in a partial one), it returns false with an error that
 * names them all (as many as the message holds, then how many more; the report has every one)
 * and no destination changes. */
bool nb_safetensors_load_opts(const char *path, int n, const nb_named_tensor *into,
                              const nb_load_opts *opts, nb_load_report *report);

/* Reads the __metadata__ entries of path, in file order, except NB_SAFETENSORS_CRC_KEY (a file
 * without __metadata__ has none) and NB_SAFETENSORS_CRC_COVERS_KEY. Only the header is read and
 * validated (as above), not the data. Returns an array of *count entries (NULL-free; a non-NULL
 * pointer even for 0); the array and its strings belong to the current scope and are released when
 * it ends. NULL with an error naming the file on failure. */
nb_metadata_entry *nb_safetensors_read_metadata(const char *path, int *count);

/* Reads every tensor of path (validated as above) into new contiguous tensors, in the order
 * the header lists them. Returns an array of *count entries; the array, the names and the
 * tensors belong to the current scope and are released when it ends. NULL with an error on
 * failure (then nothing is left in the scope). */
nb_named_tensor *nb_safetensors_read(const char *path, int *count);

#ifdef __cplusplus
}
#endif
#endif
