# Builds the web UI into OUT_DIR: `npm ci` in WEB_DIR when its node_modules are missing,
# then `node build.mjs --outdir OUT_DIR` (TypeScript bundled by esbuild).
# Run by the trainscope_server build: cmake -DWEB_DIR=... -DOUT_DIR=... -DNPM=... -DNODE=... -P build_web.cmake
if(NOT EXISTS "${WEB_DIR}/node_modules/.package-lock.json")
  message(STATUS "web: installing npm packages (npm ci in ${WEB_DIR})")
  execute_process(COMMAND "${NPM}" ci --no-audit --no-fund WORKING_DIRECTORY "${WEB_DIR}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "web: npm ci failed in ${WEB_DIR} (exit ${rc}); the npm registry must be reachable once")
  endif()
endif()
execute_process(COMMAND "${NODE}" build.mjs --outdir "${OUT_DIR}" WORKING_DIRECTORY "${WEB_DIR}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "web: bundling the UI failed (node build.mjs in ${WEB_DIR}, exit ${rc})")
endif()
