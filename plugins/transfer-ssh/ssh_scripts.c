/*
 * The guest-side programs (see ssh_scripts.h) as lists of embedded parts.
 * The parts are plugins/transfer-ssh/guest/<name>.sh, turned into C arrays by
 * core/embed.cmake at build time; edit the .sh files, not generated code.
 */
#include "ssh_scripts.h"

#include <stddef.h>

extern const char ssh_sh_lib[];
extern const char ssh_sh_facts[];
extern const char ssh_sh_exec[];
extern const char ssh_sh_kill[];
extern const char ssh_sh_push[];
extern const char ssh_sh_push_abort[];
extern const char ssh_sh_pull[];
extern const char ssh_sh_session[];

const char *const ssh_script_session[] = {ssh_sh_lib,  ssh_sh_facts,   ssh_sh_exec, ssh_sh_push,
                                          ssh_sh_pull, ssh_sh_session, NULL};
const char *const ssh_script_kill[] = {ssh_sh_lib, ssh_sh_kill, NULL};
const char *const ssh_script_push_abort[] = {ssh_sh_push_abort, NULL};
