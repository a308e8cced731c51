"""GPU metering: what each training attempt used, who pays for it, and the month's bill per tenant."""
