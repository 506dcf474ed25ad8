/* Gradient averaging over micro-batches and ranks, in a fixed order (see nabla/dist.h).
 *
 * The running sum lives in one flat buffer; buckets are slices of it. Each bucket is
 * exchanged as a reduce-scatter then an all-gather written out by hand: rank r owns chunk r
 * of the bucket, receives every rank's copy of that chunk (one all-to-all), adds them in rank
 * order, and the owners' sums are gathered back (one all-gather). Each element is added by
 * exactly one rank, in rank order, so every rank ends with the same bits whatever MPI's
 * algorithms do; the traffic is that of a ring all-reduce, 2 (N - 1) / N of the bucket. */
#include "dist_impl.h"
#include "nn/param_list.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_BUCKET_BYTES (4.0 * 1024 * 1024)

typedef struct {
    int64_t offset, length; /* elements of the flat sum */
} bucket;

struct nb_grad_reducer {
    nb_tensor **params;
    int nparams;
    nb_dtype dtype;
    int64_t *offsets; /* each parameter's place in the flat sum */
    int64_t total;    /* elements */
    void *sum;        /* running sum of the gradients, total elements */
    bucket *buckets;
    int nbuckets;
    int micro_batches; /* added since the last finish */
#ifdef NABLA_HAVE_MPI
    void *incoming; /* world_size copies of the largest chunk */
    int *send_counts, *send_displs, *recv_counts, *recv_displs;
#endif
};

void nb_grad_reducer_free(nb_grad_reducer *r) {
    if (!r) return;
    free(r->params);
    free(r->offsets);
    free(r->sum);
    free(r->buckets);
#ifdef NABLA_HAVE_MPI
    free(r->incoming);
    free(r->send_counts);
    free(r->send_displs);
    free(r->recv_counts);
    free(r->recv_displs);
#endif
    free(r);
}

/* Gives p a zeroed contiguous gradient if it has none: every micro-batch then accumulates
 * into zeros the same way, whether it is a process's first or not. */
static bool ensure_grad(nb_tensor *p) {
    if (p->grad) return true;
    p->grad = nbt_new_in(p->scope, "grad_reducer", p->dtype, p->ndim, p->shape);
    return p->grad && nb_fill_(p->grad, 0.0);
}

/* Buckets over the parameters in reverse order (backward finishes the last ones first),
 * closing a bucket once it holds bucket_bytes. */
static bool plan_buckets(nb_grad_reducer *r, double bucket_bytes) {
    size_t esize = nb_dtype_size(r->dtype);
    int64_t offset = 0;
    for (int i = r->nparams - 1; i >= 0; i--) {
        r->offsets[i] = offset;
        offset += nb_numel(r->params[i]);
    }
    r->total = offset;
    r->buckets = malloc(sizeof *r->buckets * (size_t)r->nparams);
    if (!r->buckets)
        return nbt_error("grad_reducer", "out of memory for %d buckets", r->nparams) != NULL;
    int64_t start = 0, length = 0;
    for (int i = r->nparams - 1; i >= 0; i--) {
        length += nb_numel(r->params[i]);
        if ((double)length * (double)esize >= bucket_bytes || i == 0) {
            if (length > INT32_MAX / 2)
                return nbt_error("grad_reducer", "a bucket of %lld elements is too large for MPI",
                                 (long long)length) != NULL;
            r->buckets[r->nbuckets++] = (bucket){start, length};
            start += length;
            length = 0;
        }
    }
    return true;
}

nb_grad_reducer *nb_grad_reducer_new(int n, nb_tensor *const *params, double bucket_bytes) {
    if (!nbn_check_param_list("nb_grad_reducer_new", params, n, 1, true, 0)) return NULL;
    if (!(bucket_bytes > 0)) bucket_bytes = DEFAULT_BUCKET_BYTES;
    nb_grad_reducer *r = calloc(1, sizeof *r);
    if (!r) return nbt_error("grad_reducer", "out of memory");
    r->nparams = n;
    r->dtype = params[0]->dtype;
    r->params = malloc(sizeof *r->params * (size_t)n);
    r->offsets = malloc(sizeof *r->offsets * (size_t)n);
    bool ok = r->params && r->offsets, said_why = false; /* ensure_grad and plan_buckets say why */
    if (ok) memcpy(r->params, params, sizeof *r->params * (size_t)n);
    for (int i = 0; ok && i < n; i++) said_why = !(ok = ensure_grad(r->params[i]));
    if (ok) said_why = !(ok = plan_buckets(r, bucket_bytes));
    size_t esize = nb_dtype_size(r->dtype);
    if (ok) ok = (r->sum = calloc((size_t)r->total + 1, esize)) != NULL;
#ifdef NABLA_HAVE_MPI
    int size = nb_dist_world_size();
    int64_t largest = 0;
    for (int b = 0; b < r->nbuckets; b++)
        if (r->buckets[b].length > largest) largest = r->buckets[b].length;
    int64_t chunk = (largest + size - 1) / size;
    if (ok && size > 1) {
        r->incoming = malloc((size_t)chunk * (size_t)size * esize + 1);
        r->send_counts = malloc(sizeof(int) * (size_t)size);
        r->send_displs = malloc(sizeof(int) * (size_t)size);
        r->recv_counts = malloc(sizeof(int) * (size_t)size);
        r->recv_displs = malloc(sizeof(int) * (size_t)size);
        ok = r->incoming && r->send_counts && r->send_displs && r->recv_counts && r->recv_displs;
    }
#endif
    if (!ok) {
        if (!said_why) nbt_error("grad_reducer", "out of memory for %d parameters", n);
        nb_grad_reducer_free(r);
        return NULL;
    }
    return r;
}

int nb_grad_reducer_bucket_count(const nb_grad_reducer *r) {
    return r ? r->nbuckets : 0;
}
int64_t nb_grad_reducer_bytes(const nb_grad_reducer *r) {
    return r ? r->total * (int64_t)nb_dtype_size(r->dtype) : 0;
}

bool nb_grad_reducer_add(nb_grad_reducer *r) {
    if (!r) return nbt_error("grad_reducer", "add: NULL reducer") != NULL;
    for (int i = 0; i < r->nparams; i++) {
        nb_tensor *p = r->params[i];
        if (!ensure_grad(p)) return false;
        if (!nb_is_contiguous(p->grad) || p->grad->dtype != r->dtype || !nb_same_shape(p->grad, p))
            return nbt_error("grad_reducer", "parameter #%d's gradient %s does not match it %s", i,
                             nbt_shape(p->grad), nbt_shape(p)) != NULL;
    }
    for (int i = 0; i < r->nparams; i++) {
        nb_tensor *p = r->params[i];
        int64_t n = nb_numel(p), off = r->offsets[i];
        if (r->dtype == NB_F32) {
            float *s = (float *)r->sum + off;
            const float *g = nb_data(p->grad);
            for (int64_t j = 0; j < n; j++) s[j] += g[j];
        } else {
            double *s = (double *)r->sum + off;
            const double *g = nb_data(p->grad);
            for (int64_t j = 0; j < n; j++) s[j] += g[j];
        }
        nb_zero_grad(p);
    }
    r->micro_batches++;
    return true;
}

#ifdef NABLA_HAVE_MPI
/* Chunk c of a bucket of length n split over size ranks: [n c / size, n (c + 1) / size). */
static int64_t chunk_start(int64_t n, int c, int size) {
    return n * c / size;
}

static bool exchange_bucket(nb_grad_reducer *r, const bucket *b) {
    int size = nb_dist_world_size(), me = nb_dist_rank();
    size_t esize = nb_dtype_size(r->dtype);
    char *base = (char *)r->sum + (size_t)b->offset * esize;
    int64_t my_start = chunk_start(b->length, me, size);
    int my_len = (int)(chunk_start(b->length, me + 1, size) - my_start);
    for (int c = 0; c < size; c++) {
        int64_t lo = chunk_start(b->length, c, size), hi = chunk_start(b->length, c + 1, size);
        r->send_counts[c] = (int)(hi - lo);
        r->send_displs[c] = (int)lo;
        r->recv_counts[c] = my_len;
        r->recv_displs[c] = my_len * c;
    }
    MPI_Datatype type = nbd_mpi_type(r->dtype);
    MPI_Request req;
    int rc = MPI_Ialltoallv(base, r->send_counts, r->send_displs, type, r->incoming, r->recv_counts,
                            r->recv_displs, type, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return nbd_mpi_error("averaging gradients", rc);
    if (!nbd_wait(1, &req, "averaging gradients")) return false;
    /* Every rank's copy of my chunk, added in rank order from zero. */
    if (r->dtype == NB_F32) {
        float *mine = (float *)base + my_start;
        const float *in = r->incoming;
        for (int j = 0; j < my_len; j++) {
            float s = 0;
            for (int c = 0; c < size; c++) s += in[(size_t)c * (size_t)my_len + (size_t)j];
            mine[j] = s;
        }
    } else {
        double *mine = (double *)base + my_start;
        const double *in = r->incoming;
        for (int j = 0; j < my_len; j++) {
            double s = 0;
            for (int c = 0; c < size; c++) s += in[(size_t)c * (size_t)my_len + (size_t)j];
            mine[j] = s;
        }
    }
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, type, base, r->send_counts, r->send_displs, type,
                         MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return nbd_mpi_error("averaging gradients", rc);
    return nbd_wait(1, &req, "averaging gradients");
}
#endif

bool nb_grad_reducer_finish(nb_grad_reducer *r) {
    if (!r) return nbt_error("grad_reducer", "finish: NULL reducer") != NULL;
    if (r->micro_batches == 0)
        return nbt_error("grad_reducer", "finish before any nb_grad_reducer_add") != NULL;
    if (!nbd_world_reachable("grad_reducer")) return false;
#ifdef NABLA_HAVE_MPI
    if (nbd_mpi_active() && nb_dist_world_size() > 1)
        for (int b = 0; b < r->nbuckets; b++)
            if (!exchange_bucket(r, &r->buckets[b])) return false;
#endif
    /* Written out by the same multiply in every layout of the same work, so 1 process x N
     * micro-batches and N ranks x 1 agree bit for bit. */
    double scale = 1.0 / ((double)nb_dist_world_size() * (double)r->micro_batches);
    for (int i = 0; i < r->nparams; i++) {
        nb_tensor *p = r->params[i];
        int64_t n = nb_numel(p), off = r->offsets[i];
        if (r->dtype == NB_F32) {
            float *s = (float *)r->sum + off, *g = nb_data(p->grad), k = (float)scale;
            for (int64_t j = 0; j < n; j++) g[j] = s[j] * k, s[j] = 0;
        } else {
            double *s = (double *)r->sum + off, *g = nb_data(p->grad);
            for (int64_t j = 0; j < n; j++) g[j] = s[j] * scale, s[j] = 0;
        }
    }
    r->micro_batches = 0;
    return true;
}
