# cmake -DBIN=FILE -DEMU=EMULATOR|ARG|... -P cross_wrap.cmake: FILE (just
# linked) moves to FILE.elf; FILE becomes a script running it under the
# emulator (cmake/cross_run.cmake says why).
file(RENAME ${BIN} ${BIN}.elf)
string(REPLACE "|" ";" EMU "${EMU}")
set(args "")
foreach(a IN LISTS EMU)
  string(APPEND args " '${a}'")
endforeach()
file(WRITE ${BIN} "#!/bin/sh\n# ${BIN}.elf under the emulator (cmake/cross_run.cmake)\n# TMO_QEMU_SKIP: a test that cannot run under qemu-user (tests/arm64/qemu-skips.txt)\nif [ -n \"\${TMO_QEMU_SKIP:-}\" ]; then echo \"SKIPPED: under qemu-user: \$TMO_QEMU_SKIP\"; exit 77; fi\nexec${args} -E TMO_UNDER_QEMU=1 -0 \"$0\" '${BIN}.elf' \"$@\"\n")
file(CHMOD ${BIN} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
     WORLD_READ WORLD_EXECUTE)
