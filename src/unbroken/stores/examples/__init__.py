"""Small example backends that prove the store seam: each implements only the primitives of
``unbroken.stores.backend`` and passes ``unbroken.testing.StoreContract`` unchanged."""
