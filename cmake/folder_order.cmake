# tmo_folder_order(OUT SOURCES ORDER...): the names (file names without
# extension) of SOURCES, the names in ORDER first and in that order, then the
# rest sorted.  The engine registry and the scenario table are both generated
# from a folder this way, so adding an engine or a scenario is adding a file.
function(tmo_folder_order out sources)
  set(names "")
  foreach(src IN LISTS sources)
    get_filename_component(name ${src} NAME_WE)
    list(APPEND names ${name})
  endforeach()
  list(SORT names)
  set(ordered "")
  foreach(name IN LISTS ARGN)
    if(name IN_LIST names)
      list(APPEND ordered ${name})
    endif()
  endforeach()
  foreach(name IN LISTS names)
    if(NOT name IN_LIST ordered)
      list(APPEND ordered ${name})
    endif()
  endforeach()
  set(${out} ${ordered} PARENT_SCOPE)
endfunction()
