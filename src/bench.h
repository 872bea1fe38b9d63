/*
 * The benchmarks' one window into the library's internals (tools/ `qmoe bench`, bench/): the
 * kernel tables and their peak probes (to time the micro-kernels and the machine's limits in the
 * same run), the fused operator's kernel blocks, and the MoE layer's timed forward. Everything
 * else in tools/ and bench/ uses the public headers only (the `layers` test checks it). Not
 * installed; nothing here is API.
 */
#ifndef QMOE_BENCH_H
#define QMOE_BENCH_H

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/peak.h"
#include "kernels/swiglu_quant.h"
#include "layer/phases.h"

#endif
