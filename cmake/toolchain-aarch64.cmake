# Cross build for 64-bit ARM Linux with Debian's aarch64 cross compilers (scripts/require-arm64.sh
# installs them): cmake -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake (make test-arm64).
# ctest runs the tests under qemu's user-mode emulator (CMAKE_CROSSCOMPILING_EMULATOR); the
# emulated CPU model comes from the environment at test time, QEMU_CPU (qemu's own variable:
# max, the default, has the dot product and I8MM; cortex-a76 the dot product only; cortex-a57
# is plain ARMv8.0), so one build is tested on every model.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(QMOE_ARM64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${QMOE_ARM64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${QMOE_ARM64_TRIPLE}-g++)
set(QMOE_ARM64_SYSROOT /usr/${QMOE_ARM64_TRIPLE})
set(CMAKE_FIND_ROOT_PATH ${QMOE_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

find_program(QMOE_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(QMOE_QEMU_AARCH64)
  # -L: the target's dynamic loader and libraries.
  set(CMAKE_CROSSCOMPILING_EMULATOR ${QMOE_QEMU_AARCH64};-L;${QMOE_ARM64_SYSROOT})
endif()
