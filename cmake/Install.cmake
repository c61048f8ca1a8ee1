# `cmake --install` rules and the Debian package (CPack).
#
#   cmake --install build --prefix /usr/local      # binary, config, unit, docs
#   cmake --build build --target package           # build/levee_<version>_<arch>.deb
#
# The systemd unit is deploy/systemd/levee.service, written for the packaged
# layout (/usr/bin, /etc); the installed copy names the binary and the
# configuration where the install-time prefix puts them (InstallPaths.cmake). On Debian 12, prometheus-cpp comes from the
# project-local prefix (scripts/deps.sh): it is installed beside levee in
# <libdir>/levee and found through the binary's RUNPATH.
include(GNUInstallDirs)

install(TARGETS levee RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT levee)

if(PROMCPP_LIBDIR AND NOT PROMCPP_LIBDIR MATCHES "^/(usr/)?lib")
  set(LEVEE_BUNDLED_LIBDIR "${CMAKE_INSTALL_LIBDIR}/levee")
  set_target_properties(levee PROPERTIES INSTALL_RPATH "$ORIGIN/../${LEVEE_BUNDLED_LIBDIR}")
  file(GLOB _levee_promcpp "${PROMCPP_LIBDIR}/libprometheus-cpp-core.so.*")
  install(FILES ${_levee_promcpp} DESTINATION ${LEVEE_BUNDLED_LIBDIR} COMPONENT levee)
endif()

# The example configuration (the installed default) and the systemd unit,
# placed by the install-time prefix.
install(CODE "set(LEVEE_SOURCE_DIR \"${CMAKE_SOURCE_DIR}\")\nset(LEVEE_BINARY_DIR \"${CMAKE_BINARY_DIR}\")"
        COMPONENT levee)
install(SCRIPT ${CMAKE_SOURCE_DIR}/cmake/InstallPaths.cmake COMPONENT levee)

file(GLOB _levee_docs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${_levee_docs} ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT levee)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/img DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT levee)
# Alerts and dashboard, for whoever runs Prometheus and Grafana on the host.
install(FILES ${CMAKE_SOURCE_DIR}/deploy/prometheus/levee-rules.yaml
              ${CMAKE_SOURCE_DIR}/deploy/grafana/levee-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/levee COMPONENT levee)

# --- Debian package ------------------------------------------------------------
# Built from the same install rules with prefix /usr: /usr/bin/levee,
# /etc/levee/levee.yaml (a conffile), /usr/lib/systemd/system/levee.service.
# The maintainer scripts enable and start the unit the Debian way
# (deb-systemd-helper / deb-systemd-invoke, which honour policy-rc.d).
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "levee")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "levee maintainers <levee@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "L7 admission-control reverse proxy")
set(CPACK_PACKAGE_DESCRIPTION "levee keeps serving what the backends can serve under overload, in criticality\n order and fair between tenants, and turns the rest away early with Retry-After.")
# DESTDIR-style staging, so the install-time prefix is /usr itself and
# InstallPaths.cmake puts the configuration in /etc.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX "/usr")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(LEVEE_BUNDLED_LIBDIR)
  # dpkg-shlibdeps must find the bundled library inside the package.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${CMAKE_BINARY_DIR}/_CPack_Packages/Linux/DEB/levee-${PROJECT_VERSION}-Linux/usr/${LEVEE_BUNDLED_LIBDIR}")
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/deploy/debian/conffiles
    ${CMAKE_SOURCE_DIR}/deploy/debian/postinst
    ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
    ${CMAKE_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debug info stays in the build tree; the package ships a stripped binary.
set(CPACK_STRIP_FILES ON)
include(CPack)
