/* The k largest (or smallest) entries along a dim, sorted, with their int64 indices
 * (torch.topk with sorted=True); the backward puts each value's gradient back at its index.
 *
 * Ties: PyTorch's CPU topk has no rule such as "lowest index first". It sorts (value, index)
 * pairs comparing values only (NaN above everything when largest, below when smallest), with
 * the C++ standard library: std::partial_sort of the first k when k * 64 <= n, else
 * std::nth_element at k - 1 followed by std::sort of the first k - 1. None of these is
 * stable, so which of equal values come out, and in which order, is whatever those
 * algorithms leave: top-1 of eight zeros is index 6, top-3 of [1, 3, 3, 2, 3, 1] gives
 * indices [2, 4, 1]. To match PyTorch index for index, this file follows GNU libstdc++'s
 * algorithms (the library Debian's PyTorch is built with) step for step: introselect,
 * introsort with a final insertion sort (threshold 16), and heap select / heap sort, with the
 * same pivots, thresholds and depth limits. The port was checked against libstdc++ itself on
 * random rows full of ties and NaNs, and the tests hold PyTorch's answers (the "ties" golden
 * cases, tests/test_index_ops.c). */
#include "node.h"
#include "../tensor/reduce_kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- libstdc++'s selection and sorting, on (value, index) pairs ---- */
typedef struct {
    double v; /* float32 values widen exactly, so comparisons are unchanged */
    int64_t i;
} tk_elem;

/* The comparator PyTorch passes: "x goes before y". */
static inline bool before(const tk_elem *x, const tk_elem *y, bool largest) {
    if (largest) return (isnan(x->v) && !isnan(y->v)) || x->v > y->v;
    return (!isnan(x->v) && isnan(y->v)) || x->v < y->v;
}
#define B(x, y) before((x), (y), largest)

static inline void swap_elems(tk_elem *a, tk_elem *b) {
    tk_elem t = *a;
    *a = *b;
    *b = t;
}

static int floor_log2(int64_t n) { /* n > 0 */
    return 63 - __builtin_clzll((unsigned long long)n);
}

/* Moves the median of *a, *b, *c to *result. */
static void move_median_to_first(tk_elem *result, tk_elem *a, tk_elem *b, tk_elem *c,
                                 bool largest) {
    if (B(a, b)) {
        if (B(b, c))
            swap_elems(result, b);
        else if (B(a, c))
            swap_elems(result, c);
        else
            swap_elems(result, a);
    } else if (B(a, c)) {
        swap_elems(result, a);
    } else if (B(b, c)) {
        swap_elems(result, c);
    } else {
        swap_elems(result, b);
    }
}

/* Hoare partition around *pivot, without bounds checks (the pivot stops both scans). */
static tk_elem *unguarded_partition(tk_elem *first, tk_elem *last, const tk_elem *pivot,
                                    bool largest) {
    for (;;) {
        while (B(first, pivot)) ++first;
        --last;
        while (B(pivot, last)) --last;
        if (!(first < last)) return first;
        swap_elems(first, last);
        ++first;
    }
}

/* Median of the second, middle and last elements moved to the front as the pivot. */
static tk_elem *partition_pivot(tk_elem *first, tk_elem *last, bool largest) {
    tk_elem *mid = first + (last - first) / 2;
    move_median_to_first(first, first + 1, mid, last - 1, largest);
    return unguarded_partition(first + 1, last, first, largest);
}

static void unguarded_linear_insert(tk_elem *last, bool largest) {
    tk_elem val = *last, *next = last - 1;
    while (B(&val, next)) {
        *last = *next;
        last = next;
        --next;
    }
    *last = val;
}

static void insertion_sort(tk_elem *first, tk_elem *last, bool largest) {
    if (first == last) return;
    for (tk_elem *i = first + 1; i != last; ++i) {
        if (B(i, first)) { /* a new front: shift everything before it up by one */
            tk_elem val = *i;
            memmove(first + 1, first, sizeof *first * (size_t)(i - first));
            *first = val;
        } else {
            unguarded_linear_insert(i, largest);
        }
    }
}

#define SORT_THRESHOLD 16

static void final_insertion_sort(tk_elem *first, tk_elem *last, bool largest) {
    if (last - first > SORT_THRESHOLD) {
        insertion_sort(first, first + SORT_THRESHOLD, largest);
        for (tk_elem *i = first + SORT_THRESHOLD; i != last; ++i)
            unguarded_linear_insert(i, largest);
    } else {
        insertion_sort(first, last, largest);
    }
}

/* A binary heap in comparator order: its top is the element that would go last (a max-heap
 * under "before"), so heap_select keeps the k that go first and evicts the top. */
static void push_heap(tk_elem *first, int64_t hole, int64_t top, tk_elem value, bool largest) {
    int64_t parent = (hole - 1) / 2;
    while (hole > top && B(first + parent, &value)) {
        first[hole] = first[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    first[hole] = value;
}

static void adjust_heap(tk_elem *first, int64_t hole, int64_t len, tk_elem value, bool largest) {
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (B(first + child, first + (child - 1))) child--;
        first[hole] = first[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        first[hole] = first[child - 1];
        hole = child - 1;
    }
    push_heap(first, hole, top, value, largest);
}

static void make_heap(tk_elem *first, tk_elem *last, bool largest) {
    int64_t len = last - first;
    if (len < 2) return;
    for (int64_t parent = (len - 2) / 2;; parent--) {
        adjust_heap(first, parent, len, first[parent], largest);
        if (parent == 0) return;
    }
}

/* Moves the heap's top to *result and *result's old value into the heap. */
static void pop_heap(tk_elem *first, tk_elem *last, tk_elem *result, bool largest) {
    tk_elem value = *result;
    *result = *first;
    adjust_heap(first, 0, last - first, value, largest);
}

static void heap_select(tk_elem *first, tk_elem *middle, tk_elem *last, bool largest) {
    make_heap(first, middle, largest);
    for (tk_elem *i = middle; i < last; ++i)
        if (B(i, first)) pop_heap(first, middle, i, largest);
}

static void sort_heap(tk_elem *first, tk_elem *last, bool largest) {
    while (last - first > 1) {
        --last;
        pop_heap(first, last, last, largest);
    }
}

static void partial_sort(tk_elem *first, tk_elem *middle, tk_elem *last, bool largest) {
    heap_select(first, middle, last, largest);
    sort_heap(first, middle, largest);
}

static void introsort_loop(tk_elem *first, tk_elem *last, int depth, bool largest) {
    while (last - first > SORT_THRESHOLD) {
        if (depth == 0) { /* quicksort went quadratic: heap sort the rest */
            partial_sort(first, last, last, largest);
            return;
        }
        --depth;
        tk_elem *cut = partition_pivot(first, last, largest);
        introsort_loop(cut, last, depth, largest);
        last = cut;
    }
}

static void sort_elems(tk_elem *first, tk_elem *last, bool largest) {
    if (first == last) return;
    introsort_loop(first, last, floor_log2(last - first) * 2, largest);
    final_insertion_sort(first, last, largest);
}

static void nth_element(tk_elem *first, tk_elem *nth, tk_elem *last, bool largest) {
    if (first == last || nth == last) return;
    int depth = floor_log2(last - first) * 2;
    while (last - first > 3) {
        if (depth == 0) {
            heap_select(first, nth + 1, last, largest);
            swap_elems(first, nth);
            return;
        }
        --depth;
        tk_elem *cut = partition_pivot(first, last, largest);
        if (cut <= nth)
            first = cut;
        else
            last = cut;
    }
    insertion_sort(first, last, largest);
}

/* PyTorch's choice between the two (aten/src/ATen/native/TopKImpl.h): the first k of q[0, n)
 * end up sorted in q[0, k). */
static void select_top(tk_elem *q, int64_t n, int64_t k, bool largest) {
    if (k == 0) return;
    if (k * 64 <= n) {
        partial_sort(q, q + k, q + n, largest);
    } else {
        nth_element(q, q + k - 1, q + n, largest);
        sort_elems(q, q + k - 1, largest); /* q[k - 1] is already in place */
    }
}

/* ---- the op ---- */
/* x contiguous, seen as [O, n, I] (dim in the middle); values and indices as [O, k, I]. */
typedef struct {
    nb_dtype dtype;
    const char *x;
    char *values;
    int64_t *indices;
    int64_t n, k, I;
    bool largest;
    atomic_bool failed; /* a worker could not allocate its row buffer */
} topk_job;

/* Rows of up to this many entries are sorted in a buffer on the stack (4 KB): a router's
 * top-k over its experts then costs no malloc per step. */
#define TOPK_STACK_ROW 256

static void topk_rows(int64_t begin, int64_t end, void *vctx) {
    topk_job *j = vctx;
    tk_elem on_stack[TOPK_STACK_ROW];
    tk_elem *q = j->n <= TOPK_STACK_ROW ? on_stack : malloc(sizeof *q * (size_t)j->n);
    if (!q) {
        atomic_store(&j->failed, true);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        int64_t o = r / j->I, i = r % j->I;
        int64_t in0 = o * j->n * j->I + i, out0 = o * j->k * j->I + i;
        for (int64_t e = 0; e < j->n; e++) {
            int64_t at = in0 + e * j->I;
            q[e].v = j->dtype == NB_F32 ? ((const float *)j->x)[at] : ((const double *)j->x)[at];
            q[e].i = e;
        }
        select_top(q, j->n, j->k, j->largest);
        for (int64_t e = 0; e < j->k; e++) {
            int64_t at = out0 + e * j->I;
            if (j->dtype == NB_F32)
                ((float *)j->values)[at] = (float)q[e].v;
            else
                ((double *)j->values)[at] = q[e].v;
            j->indices[at] = q[e].i;
        }
    }
    if (q != on_stack) free(q);
}

/* i[0] dim, i[1] set for a 0-d input; saved[0] the indices. Each row's indices are distinct,
 * so scattering the gradient adds each value's gradient at its own position. */
static void topk_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0];
    if (n->i[1]) {
        nba_accumulate(n, 0, gout);
        return;
    }
    nb_tensor *gx = nb_zeros(x->dtype, x->ndim, x->shape);
    if (gx && nbt_scatter_add_dim(gx, (int)n->i[0], n->saved[0], gout)) nba_accumulate(n, 0, gx);
}

nb_tensor *nb_topk(const nb_tensor *x, int64_t k, int dim, bool largest, nb_tensor **indices) {
    const char *op = "topk";
    if (!nba_check_float(op, x)) return NULL;
    nb_tensor *values, *idx;
    int d = 0;
    if (x->ndim == 0) { /* as in PyTorch: dim 0 or -1, k 1, the element itself at index 0 */
        if (dim != 0 && dim != -1)
            return nbt_error(op,
                             "dim %d is out of range for a tensor of shape %s (expected -1 to 0)",
                             dim, nbt_shape(x));
        if (k != 1)
            return nbt_error(op, "k %lld is out of range for a tensor of shape %s (expected 1)",
                             (long long)k, nbt_shape(x));
        values = nbt_contiguous_as(x, x->dtype);
        idx = nb_zeros(NB_I64, 0, (const int64_t[1]){0});
        if (!values || !idx) return NULL;
    } else {
        d = nbt_dim(op, dim, x->ndim);
        if (d < 0) return NULL;
        if (k < 0 || k > x->shape[d])
            return nbt_error(op, "k %lld is out of range for dim %d of size %lld (x %s)",
                             (long long)k, dim, (long long)x->shape[d], nbt_shape(x));
        int64_t shape[NB_MAX_DIMS];
        memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
        shape[d] = k;
        nb_tensor *xc = nbt_contiguous(x);
        values = xc ? nbt_new(op, x->dtype, x->ndim, shape) : NULL;
        idx = values ? nbt_new(op, NB_I64, x->ndim, shape) : NULL;
        if (!idx) return NULL;
        topk_job j = {.dtype = x->dtype,
                      .x = nbt_ptr(xc),
                      .values = nbt_ptr(values),
                      .indices = (int64_t *)nbt_ptr(idx),
                      .n = x->shape[d],
                      .k = k,
                      .I = 1,
                      .largest = largest};
        atomic_init(&j.failed, false);
        int64_t rows = 1;
        for (int i = 0; i < x->ndim; i++)
            if (i != d) rows *= x->shape[i];
        for (int i = d + 1; i < x->ndim; i++) j.I *= x->shape[i];
        if (rows > 0 && k > 0) {
            /* A row costs about n log n comparisons; rows are independent. */
            nbt_parallel_ranges(rows, 4096 / (j.n + 1) + 1, topk_rows, &j);
            if (atomic_load(&j.failed))
                return nbt_error(op, "out of memory for a row of %lld entries (x %s)",
                                 (long long)j.n, nbt_shape(x));
        }
    }
    nb_node *n = nba_record(op, values, 1, &x, topk_backward);
    if (n) n->i[0] = d, n->i[1] = x->ndim == 0, n->saved[0] = idx;
    if (indices) *indices = idx;
    return values;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): gradchecks on distinct values (a tie would make the choice,
 * and so the derivative, jump); the golden cases add rows full of ties, where PyTorch's picks
 * must be matched index for index ---- */
#include "op_def.h"

typedef struct {
    int64_t k;
    int dim;
    bool largest;
    int expand_ndim; /* > 0: the input is expanded to this shape first */
    int64_t expand[2];
} topk_ctx;

static nb_tensor *cat_topk(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const topk_ctx *c = ctx;
    nb_tensor *x = c->expand_ndim ? nb_expand(in[0], c->expand_ndim, c->expand) : in[0];
    nb_tensor *idx = NULL;
    nb_tensor *v = nb_topk(x, c->k, c->dim, c->largest, &idx);
    return idx ? v : NULL;
}

static const topk_ctx top2_rows = {2, 1, true, 0, {0}}, bottom3_cols = {3, 0, false, 0, {0}},
                      all5 = {5, -1, true, 0, {0}}, top1_wide = {1, 1, true, 0, {0}},
                      bottom2_mid = {2, 1, false, 0, {0}}, scalar1 = {1, 0, true, 0, {0}},
                      top2_expanded = {2, 1, true, 2, {3, 5}};

static int golden_topk(nba_golden_call *c, nb_tensor **out) {
    out[1] = NULL;
    out[0] = nb_topk(c->input(c, "a", true), c->integer(c, "k"), (int)c->integer(c, "dim"),
                     c->flag(c, "largest"), &out[1]);
    return 2;
}

#define D NBA_DISTINCT
/* clang-format off */
static const nba_entry topk_entries[] = {
    {"topk 2 largest along dim 1 of [3,5]", NBA_RANDOM, cat_topk, 1, {IN_D(D, 3, 5)}, &top2_rows},
    {"topk 3 smallest along dim 0 of [4,3]", NBA_RANDOM, cat_topk, 1, {IN_D(D, 4, 3)}, &bottom3_cols},
    {"topk 5 of 5 (a full sort) of [2,5]", NBA_RANDOM, cat_topk, 1, {IN_D(D, 2, 5)}, &all5},
    {"topk 1 of 70 (partial sort) of [2,70]", NBA_RANDOM, cat_topk, 1, {IN_D(D, 2, 70)}, &top1_wide},
    {"topk 1 of a 0-d", NBA_RANDOM, cat_topk, 1, {{.ndim = 0, .domain = D}}, &scalar1},
    {"topk 2 largest along dim -1 of transposed [2,5]", NBA_STRIDED, cat_topk, 1, {IN_TD(D, 2, 5)}, &all5},
    {"topk 2 largest along dim 1 of transposed [3,5]", NBA_STRIDED, cat_topk, 1, {IN_TD(D, 3, 5)}, &top2_rows},
    {"topk 2 smallest along dim 1 of sliced [2,3,4]", NBA_STRIDED, cat_topk, 1, {IN_SD(D, 2, 3, 4)}, &bottom2_mid},
    {"topk 2 of [1,5] expanded to [3,5]", NBA_BROADCAST, cat_topk, 1, {IN_D(D, 1, 5)}, &top2_expanded},
};
/* "ties": values from {-1, -0.5, 0, 0.5, 1}, so most rows repeat their top values; the
 * shapes reach both of PyTorch's paths (partial sort when k * 64 <= n, else select and sort)
 * and the sort's insertion-sort threshold (k - 1 > 16). */
static const nba_golden_case topk_cases[] = {
    {"a: distinct [5]", "k=2, dim=0, largest=True"},
    {"a: distinct [3,6]", "k=3, dim=1, largest=False"},
    {"a: distinct [4,3]", "k=4, dim=0, largest=True"},
    {"a: distinct [2,3,5]", "k=1, dim=-2, largest=False"},
    {"a: []", "k=1, dim=0, largest=True"},
    {"a: ties [4,8]", "k=3, dim=1, largest=True"},
    {"a: ties [4,8]", "k=8, dim=-1, largest=False"},
    {"a: ties [2,200]", "k=3, dim=1, largest=True"},
    {"a: ties [2,200]", "k=2, dim=1, largest=False"},
    {"a: ties [3,40]", "k=40, dim=1, largest=True"},
    {"a: ties [50,3]", "k=20, dim=0, largest=False"},
    {"a: ties [2,6,5]", "k=4, dim=1, largest=True"}};
static const nba_golden topk_goldens[] = {
    NBA_GOLDEN("topk", golden_topk, "tuple(torch.topk(a, k, dim=dim, largest=largest))", topk_cases)};
NBA_OP_DEF(nba_op_topk, "topk", topk_entries, topk_goldens);
/* clang-format on */
#endif /* NABLA_TESTS */
