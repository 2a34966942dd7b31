/* kcage: sandboxed workers and measurement for untrusted compute kernels. */
#ifndef KCAGE_H
#define KCAGE_H

#include "kcage/cgroup.h"
#include "kcage/error.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"

#endif
