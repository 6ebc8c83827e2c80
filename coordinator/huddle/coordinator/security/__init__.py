"""Security of the coordinator: TLS, SASL authentication, and Kafka's ACL model.

* ``tls``: the listener's SSL context and the principal of a client certificate;
* ``credentials``: salted, iterated SCRAM credentials (never a password);
* ``sasl``: one SASL exchange on the server's side (SCRAM-SHA-256/512, PLAIN);
* ``acls``: ACL bindings and the authorizer that decides with them (DENY wins);
* ``access``: what each request needs, and the answers that refuse it;
* ``store``: users and ACLs kept with the coordinator's state (data dir or etcd);
* ``throttle``: password guesses are limited per address group, however many connections.
"""
