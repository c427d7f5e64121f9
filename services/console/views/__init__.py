"""View models: what each page shows, built from the services' replies."""
