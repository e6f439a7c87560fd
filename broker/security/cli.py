"""``rocketscope admin genCerts``: a CA and certificates for a development cluster."""

from __future__ import annotations

import click

from .certs import DEFAULT_HOSTS, generate_dev_certs


@click.command("genCerts")
@click.option("-o", "--outputDir", "out_dir", default="certs", show_default=True, help="directory to write into")
@click.option("-H", "--host", "hosts", multiple=True,
              help=f"extra SAN of the server certificate (repeatable); always has {', '.join(DEFAULT_HOSTS)}")
@click.option("-c", "--client", "clients", multiple=True, help="client certificate name (repeatable; default client)")
@click.option("-d", "--days", type=click.IntRange(1, 3650), default=825, show_default=True, help="validity in days")
@click.option("--keyPassword", "key_password", default=None, envvar="ROCKETSCOPE_KEY_PASSWORD",
              help="encrypt the private keys (or env ROCKETSCOPE_KEY_PASSWORD)")
@click.option("-f", "--force", is_flag=True, help="replace existing files")
def gen_certs(out_dir: str, hosts: tuple[str, ...], clients: tuple[str, ...], days: int, key_password: str | None,
              force: bool) -> None:
    """Write ca.pem, server.pem/.key and client certificates for a development cluster (not for production)."""
    try:
        res = generate_dev_certs(out_dir, hosts, days, clients or ("client",), key_password, force)
    except (FileExistsError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"CA:     {res.ca_cert}  (key {res.ca_key}; keep it private)")
    click.echo(f"server: {res.server_cert}  {res.server_key}")
    for name, (cert, key) in res.client_certs.items():
        click.echo(f"client {name}: {cert}  {key}")
    click.echo("broker.conf:\n"
               "  tls.server.mode=enforcing\n"
               f"  tls.server.certPath={res.server_cert}\n  tls.server.keyPath={res.server_key}\n"
               f"  tls.server.trustCertPath={res.ca_cert}\n  tls.client.trustCertPath={res.ca_cert}\n"
               + ("  tls.server.keyPassword=<the password>\n" if key_password else "")
               + f"clients: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={res.ca_cert} and tls_enable=True")
