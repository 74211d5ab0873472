"""The software-defined assets, grouped as the six progress stages are: each calls one stage
function and returns its text-free metadata."""
