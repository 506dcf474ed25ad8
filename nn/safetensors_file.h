/* Internal: reading and validating safetensors files (shared by load and read), dtype names,
 * and the bitwise strided copies both directions use. */
#ifndef NABLA_SAFETENSORS_FILE_H
#define NABLA_SAFETENSORS_FILE_H

#include "nabla/checkpoint.h"
#include "tensor/nbt.h"

#include <jansson.h>

/* Larger headers are refused before allocating (the reference implementation's limit). */
#define NBST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct {
    const char *name; /* points into the parsed header: valid until nbst_close */
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data section */
} nbst_entry;

typedef struct {
    const char *op, *path; /* for error messages; borrowed */
    int fd;
    uint64_t file_size, header_len, data_len; /* data section = file_size - 8 - header_len */
    json_t *header;
    nbst_entry *entries; /* in header order */
    int count;
    unsigned char *data;    /* the data section, once nbst_read_data has run */
    const json_t *metadata; /* the __metadata__ object (borrowed from header), or NULL */
    bool has_crc;           /* the metadata holds NB_SAFETENSORS_CRC_KEY ... */
    uint32_t crc;           /* ... with this CRC-32 of the data section */
    /* The checksum is this file's: no NB_SAFETENSORS_CRC_COVERS_KEY (files of older nabla),
     * or one that names this file's tensor index and data length. */
    bool crc_applies;
} nbst_file;

/* Orders entries by data offsets (begin, then end, then name): the index's order. */
int nbst_by_offsets(const void *a, const void *b); /* for qsort of const nbst_entry * */
/* The CRC-32 of the tensor index of these entries, sorted with nbst_by_offsets (see
 * checkpoint.h's comment for the bytes it covers). */
uint32_t nbst_index_crc(int n, const nbst_entry *const *sorted);
/* The NB_SAFETENSORS_CRC_COVERS_KEY value for an index CRC and a data length: "%08x %llu". */
#define NBST_COVERS_LEN 32
void nbst_covers_text(char out[NBST_COVERS_LEN], uint32_t index_crc, uint64_t data_len);

/* Opens path and validates its header: length against the file size, JSON, each entry's
 * dtype, shape and offsets, that the entries cover the data section exactly once, and that
 * __metadata__ holds only strings (its checksum, if any, 8 lowercase hex digits).
 * Errors name op and path. On failure everything is already released. */
bool nbst_open(nbst_file *f, const char *op, const char *path);
/* Reads the whole data section into f->data, checks it against the CRC-32 of the metadata (if
 * the file has one that applies to it) and that bool tensors hold only 0 and 1. */
bool nbst_read_data(nbst_file *f);
/* Releases what nbst_open and nbst_read_data acquired. Safe to call twice. */
void nbst_close(nbst_file *f);

/* Checks the values a destination is about to receive: `bytes` are dest's new elements,
 * row-major, in dest's dtype and shape. Returns NULL if they are acceptable, else why not
 * (a message the loader puts after the file and tensor names). */
typedef const char *(*nbst_check_fn)(const nb_tensor *dest, const void *bytes, void *ctx);

/* nb_safetensors_load_opts (opts and report may be NULL) with an extra check of each
 * destination's values (check may be NULL), run after the file is validated and before any
 * destination is written: all or nothing. With match_prefix, names may also match with a
 * prefix removed from every file name or from every destination name (nb_module_load_opts'
 * rule; names under "optim." take no prefix). */
bool nbst_load(const char *op, const char *path, int n, const nb_named_tensor *into,
               const nb_load_opts *opts, bool match_prefix, nbst_check_fn check, void *ctx,
               nb_load_report *report);

/* A tensor of the file as a load matches it: an entry, or one slice of an entry a name map
 * splits, under the name the map gives it. */
typedef struct {
    const char *file_name; /* as in the file: borrowed from the header */
    char *name;            /* after the name map: owned (nbst_free_sources) */
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    uint64_t begin, end; /* bytes in the data section */
    int parts;           /* > 1: slice of an entry split in this many parts */
    bool unsplittable;   /* the entry's dim 0 does not split in `parts` (shape is the entry's) */
} nbst_source;

/* The tensors f's entries become under map (NULL: each entry as it is), in entry order, as a
 * new array of *count (free with nbst_free_sources); dropped entries are left out. NULL with
 * an error naming the file when out of memory. */
nbst_source *nbst_map_sources(const nbst_file *f, const nb_name_map *map, int *count);
void nbst_free_sources(nbst_source *s, int count);
/* Checks a caller's map: patterns and names non-NULL with one '*' at most, parts in range.
 * False with an error naming op, path and the rule. */
bool nbst_check_map(const char *op, const char *path, const nb_name_map *map);

/* Why name cannot name a tensor in a safetensors file, as a phrase ("an empty name": NULL,
 * empty, the reserved __metadata__, not valid UTF-8), or NULL if it can. The saver's rule,
 * which the module API applies where names are given, so every model it builds can be saved. */
const char *nbst_name_problem(const char *name);

/* "F32", "F64", "I64", "BOOL". */
const char *nbst_dtype_name(nb_dtype dt);
/* Size in bytes of t's data (numel * element size). */
uint64_t nbst_nbytes(const nb_tensor *t);
/* Copies t's elements bytewise in row-major order into dst (nbst_nbytes(t) bytes). */
void nbst_gather(void *dst, const nb_tensor *t);
/* Copies row-major bytes from src bytewise into t's elements, whatever t's strides. */
void nbst_scatter(nb_tensor *t, const void *src);

#endif
