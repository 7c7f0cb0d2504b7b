/*
 * md_blob.c — embeds the static guest program (md_guest.c, built as the
 * machine-docker-guest target) into machine-docker.so, so the plugin is one
 * file: at acquire these bytes go into the container as /.mcp-relay/init.
 */
#ifndef MACHINE_DOCKER_GUEST_PATH
#error "MACHINE_DOCKER_GUEST_PATH must name the built machine-docker-guest program"
#endif

__asm__(".section .rodata.machine_docker_guest,\"a\",@progbits\n"
        ".balign 16\n"
        ".globl machine_docker_guest_start\n"
        ".hidden machine_docker_guest_start\n"
        "machine_docker_guest_start:\n"
        ".incbin \"" MACHINE_DOCKER_GUEST_PATH "\"\n"
        ".globl machine_docker_guest_end\n"
        ".hidden machine_docker_guest_end\n"
        "machine_docker_guest_end:\n"
        ".previous\n");
