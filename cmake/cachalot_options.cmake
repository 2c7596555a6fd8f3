# Compiler options for cachalot's own targets: warnings (errors by default) and sanitizers.
add_library(cachalot_warnings INTERFACE)
target_compile_options(cachalot_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  $<$<AND:$<BOOL:${CACHALOT_WERROR}>,$<COMPILE_LANGUAGE:CXX,C>>:-Werror>)

if(CACHALOT_SANITIZE)
  add_compile_options(-fsanitize=${CACHALOT_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${CACHALOT_SANITIZE})
endif()
