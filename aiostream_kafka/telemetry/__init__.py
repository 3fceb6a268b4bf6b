"""KIP-714 client metrics pushed to the broker: the OTLP encoder (``otlp``), the interval
statistics the clients record (``stats``), the standard metrics of each client
(``client_metrics``) and the pusher task (``push``)."""
