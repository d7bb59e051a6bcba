# One probe of the layers' include folders (CMakeLists.txt): compiles a file that includes HEADER as a
# source of LAYER would (its folder of links, build/layers/LAYER/, and nothing else of src/), and passes
# when the outcome is EXPECT: "compiles", or "fails" with the compiler naming the header it did not find.
#   cmake -DCOMPILER=c++ -DLAYERS_DIR=build/layers -DLAYER=nn -DHEADER=app/run.h -DEXPECT=fails
#         -DWORK_DIR=build/layer_probes -P cmake/layer_probe.cmake
foreach(var COMPILER LAYERS_DIR LAYER HEADER EXPECT WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "layer_probe: -D${var}= is missing")
  endif()
endforeach()
string(MAKE_C_IDENTIFIER "${LAYER}_${HEADER}" probe_name)
set(probe ${WORK_DIR}/${probe_name}.cc)
file(WRITE ${probe} "#include \"${HEADER}\"\nint main() { return 0; }\n")
execute_process(COMMAND ${COMPILER} -std=c++20 -fsyntax-only -I${LAYERS_DIR}/${LAYER} ${probe}
                RESULT_VARIABLE status ERROR_VARIABLE errors OUTPUT_VARIABLE output)
if(EXPECT STREQUAL "compiles")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "a source of ${LAYER} cannot include ${HEADER}, a header of its own layer or one below:\n${errors}")
  endif()
  message(STATUS "a source of ${LAYER} includes ${HEADER}")
elseif(EXPECT STREQUAL "fails")
  if(status EQUAL 0)
    message(FATAL_ERROR "a source of ${LAYER} could include ${HEADER}, a header of a layer above it")
  endif()
  string(FIND "${errors}" "${HEADER}: No such file" named)
  if(named LESS 0)
    message(FATAL_ERROR "including ${HEADER} from ${LAYER} failed, but not for want of the header:\n${errors}")
  endif()
  message(STATUS "a source of ${LAYER} cannot include ${HEADER}: ${HEADER} is not found")
else()
  message(FATAL_ERROR "layer_probe: EXPECT is compiles or fails, not ${EXPECT}")
endif()
