"""The aiokafka adapter: the client (``client.py``), the offsets coordinator channel
(``channel.py``), the one translation of aiokafka's errors (``errors.py``), the record
batch CRC check every fetch path shares (``crc.py``), the fetch loops' own connection that
reads a fetch response into one buffer per record set (``fetch_connection.py``), the
FetchRequest v12+ encoder (``fetch_request.py``), fetch sessions (``fetch_session.py``, pure)
and the topic-id MetadataRequest (``topic_ids.py``).

Nothing outside this package imports ``aiokafka.errors`` or touches aiokafka's private
attributes; the rest of the consumer sees ``aiozkconsumer.errors`` and the names of
``errors.py``. aiokafka's protocol classes and record parsers are used where requests are
built and answers parsed.
"""
