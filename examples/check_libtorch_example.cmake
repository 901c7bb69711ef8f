# Runs the LibTorch example, then reads its store with the trainscope CLI: the run must be
# listed, finished, and hold the watched series. Fails the test with what was missing.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${EXAMPLE} ${WORK} 40 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "libtorch_train failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CLI} runs ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE runs ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT runs MATCHES "libtorch-example")
  message(FATAL_ERROR "trainscope runs did not list the example run (${rc}):\n${runs}\n${err}")
endif()
# `trainscope show` where the CLI has it: it must read the store and name the run or its series.
execute_process(COMMAND ${CLI} show ${WORK}/libtorch-example RESULT_VARIABLE rc OUTPUT_VARIABLE show ERROR_VARIABLE err)
if(rc EQUAL 0 AND NOT show MATCHES "libtorch-example|grad/fc1.weight|train/loss")
  message(FATAL_ERROR "trainscope show printed neither the run nor its series:\n${show}")
endif()
execute_process(COMMAND ${CLI} diagnose ${WORK}/libtorch-example --json RESULT_VARIABLE rc OUTPUT_VARIABLE diag
                ERROR_VARIABLE err)
if(NOT diag MATCHES "\"steps\": *(39|40)")
  message(FATAL_ERROR "trainscope diagnose did not read the 40 steps (0..39) (${rc}):\n${diag}\n${err}")
endif()
message(STATUS "libtorch example: store read back by the CLI")
