# Run by `cmake --install` (install(SCRIPT)): the systemd unit and the
# configuration go where the install-time prefix says, so the same build
# installs to /usr/local by hand and to /usr in the Debian package.
#   /usr        -> /etc/levee/levee.yaml,            /usr/lib/systemd/system/levee.service
#   /usr/local  -> /usr/local/etc/levee/levee.yaml,  /usr/local/lib/systemd/system/levee.service
# (GNU conventions, as GNUInstallDirs computes CMAKE_INSTALL_FULL_SYSCONFDIR.)
# Expects LEVEE_SOURCE_DIR and LEVEE_BINARY_DIR.
set(_prefix "${CMAKE_INSTALL_PREFIX}")
if(_prefix STREQUAL "/usr")
  set(_etc "/etc")
elseif(_prefix MATCHES "^/opt/")
  set(_etc "/etc${_prefix}")
else()
  set(_etc "${_prefix}/etc")
endif()

file(INSTALL DESTINATION "${_etc}/levee" TYPE FILE FILES "${LEVEE_SOURCE_DIR}/config/levee.yaml")

# deploy/systemd/levee.service names the packaged layout; rewrite it for this prefix.
file(READ "${LEVEE_SOURCE_DIR}/deploy/systemd/levee.service" _unit)
string(REPLACE "/usr/bin/levee" "${_prefix}/bin/levee" _unit "${_unit}")
string(REPLACE "/etc/levee/" "${_etc}/levee/" _unit "${_unit}")
string(REPLACE "/usr/share/doc/levee/" "${_prefix}/share/doc/levee/" _unit "${_unit}")
file(WRITE "${LEVEE_BINARY_DIR}/install/levee.service" "${_unit}")
file(INSTALL DESTINATION "${_prefix}/lib/systemd/system" TYPE FILE
     FILES "${LEVEE_BINARY_DIR}/install/levee.service")
