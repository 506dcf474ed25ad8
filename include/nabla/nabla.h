/* nabla: strided tensors, reverse-mode autodiff and transformer pieces in C11.
 * Include this one header. */
#ifndef NABLA_H
#define NABLA_H

#include "nabla/tensor.h"
#include "nabla/autograd.h"
#include "nabla/function.h"
#include "nabla/parallel.h"
#include "nabla/ops.h"
#include "nabla/checkpoint.h"
#include "nabla/module.h"
#include "nabla/nn.h"
#include "nabla/optim.h"
#include "nabla/generate.h"
#include "nabla/data.h"
#include "nabla/dist.h"
#include "nabla/train.h"
#include "nabla/gguf.h"
#include "nabla/blocks.h"
#include "nabla/text.h"

#endif
