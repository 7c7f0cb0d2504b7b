/*
 * init_blob.c — embeds the static guest init program (local_init.c, built
 * as the machine-local-init target) into machine-local.so, so the plugin is
 * one self-contained file: at init it copies these bytes into a sealed
 * memfd and runs guests' inits from there.
 */
#ifndef MACHINE_LOCAL_INIT_PATH
#error "MACHINE_LOCAL_INIT_PATH must name the built machine-local-init program"
#endif

__asm__(".section .rodata.machine_local_init,\"a\",@progbits\n"
        ".balign 16\n"
        ".globl machine_local_init_start\n"
        ".hidden machine_local_init_start\n"
        "machine_local_init_start:\n"
        ".incbin \"" MACHINE_LOCAL_INIT_PATH "\"\n"
        ".globl machine_local_init_end\n"
        ".hidden machine_local_init_end\n"
        "machine_local_init_end:\n"
        ".previous\n");
