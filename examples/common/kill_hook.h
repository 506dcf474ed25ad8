/* A test hook of the example trainers, for the resume tests (tests/resume_check.sh). */
#ifndef NABLA_EXAMPLES_KILL_HOOK_H
#define NABLA_EXAMPLES_KILL_HOOK_H

#include <stdint.h>

/* When the environment variable NABLA_TEST_KILL_AFTER_STEP equals steps_done, the process
 * kills itself with SIGKILL, as an interrupted run would die. */
void kill_hook(int64_t steps_done);

#endif
