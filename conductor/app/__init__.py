"""The application on top of the services: the `conductor` CLI, the demo, the runtime that serves services by name,
and the AsyncAPI export. The foundation (`conductor.*` outside this package) never imports from here or from a
service."""
