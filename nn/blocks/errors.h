/* Errors of the blocks (internal to this folder), following nabla's conventions. */
#ifndef NABLA_BLOCKS_ERRORS_H
#define NABLA_BLOCKS_ERRORS_H

#include <nabla/nabla.h>

/* For a NULL argument: records "op: NULL argument" unless an error is already recorded (the
 * first error of a chain names what really failed, as nabla's ops keep it). Returns NULL. */
void *blk_null_argument(const char *op);

/* Prefixes the current error with m's type and dotted path ("RMSNorm: 'layers.0.ffn_norm':
 * rms_norm: ..."), so a failure inside a forward names the module it happened in. Returns
 * NULL. */
void *blk_module_error(const nb_module *m);

#endif
